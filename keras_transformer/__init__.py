"""keras-transformer: the Transformer of "Attention Is All You Need" as Keras 3 layers."""

from keras_transformer.config import PRESETS, ConfigError, TransformerConfig
from keras_transformer.cpu_allocator import reuse_freed_memory
from keras_transformer.optimizer import TransformerSchedule
from keras_transformer.transformer import Transformer
from keras_transformer.xla_flags import prefer_wide_vectors

# Importing TensorFlow runs no operation and compiles nothing with XLA, so these still come
# before it creates its CPU allocator and before its first compilation
# (keras_transformer/cpu_allocator.py, keras_transformer/xla_flags.py).
reuse_freed_memory()
prefer_wide_vectors()

__all__ = ["PRESETS", "ConfigError", "Transformer", "TransformerConfig", "TransformerSchedule"]
