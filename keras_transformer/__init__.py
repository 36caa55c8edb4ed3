"""keras-transformer: the Transformer of "Attention Is All You Need" as Keras 3 layers."""

from keras_transformer.config import PRESETS, ConfigError, TransformerConfig
from keras_transformer.optimizer import TransformerSchedule
from keras_transformer.transformer import Transformer

__all__ = ["PRESETS", "ConfigError", "Transformer", "TransformerConfig", "TransformerSchedule"]
