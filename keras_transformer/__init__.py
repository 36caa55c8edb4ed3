"""keras-transformer: the Transformer of "Attention Is All You Need" as Keras 3 layers."""

from keras_transformer.config import PRESETS, ConfigError, TransformerConfig
from keras_transformer.optimizer import TransformerSchedule
from keras_transformer.transformer import Transformer
from keras_transformer.xla_flags import prefer_wide_vectors

# Importing TensorFlow compiles nothing with XLA, so this still comes before its first
# compilation (keras_transformer/xla_flags.py).
prefer_wide_vectors()

__all__ = ["PRESETS", "ConfigError", "Transformer", "TransformerConfig", "TransformerSchedule"]
