"""The model of §3: the encoder-decoder `Transformer`, built from `keras_transformer.layers`."""

from keras_transformer.model.transformer import Transformer

__all__ = ["Transformer"]
