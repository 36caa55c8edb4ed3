"""The Transformer's building blocks (§3), one Keras layer per file, each named as the paper
names it. Everything here is `keras.ops`, so it runs on any Keras backend.

| paper                                         | module                          |
|-----------------------------------------------|---------------------------------|
| §3.2.1 Scaled Dot-Product Attention           | `scaled_dot_product_attention`  |
| §3.2.2 Multi-Head Attention (its projections) | `multi_head_attention` (`head_projection`) |
| §3.2.3 masking                                | `masks`                         |
| §3.3 Position-wise Feed-Forward Networks      | `position_wise_feed_forward`    |
| §3.4 Embeddings and Softmax                   | `embeddings`                    |
| §3.5 Positional Encoding                      | `positional_encoding`           |
| §3.1 residual + layer normalization           | `add_and_norm`, `layer_normalization` |
| §5.4 Residual Dropout                         | `dropout`                       |
| §3.1 encoder and decoder stacks               | `encoder_layer`, `decoder_layer` |
"""

from keras_transformer.layers.add_and_norm import AddAndNorm
from keras_transformer.layers.decoder_layer import DecoderLayer
from keras_transformer.layers.dropout import Dropout
from keras_transformer.layers.embeddings import SharedEmbedding
from keras_transformer.layers.encoder_layer import EncoderLayer
from keras_transformer.layers.head_projection import HeadProjection
from keras_transformer.layers.layer_normalization import LayerNormalization
from keras_transformer.layers.multi_head_attention import MultiHeadAttention
from keras_transformer.layers.position_wise_feed_forward import PositionWiseFeedForward
from keras_transformer.layers.positional_encoding import (
    LearnedPositionalEmbedding,
    SinusoidalPositionalEncoding,
)
from keras_transformer.layers.scaled_dot_product_attention import scaled_dot_product_attention

__all__ = [
    "AddAndNorm",
    "DecoderLayer",
    "Dropout",
    "EncoderLayer",
    "HeadProjection",
    "LayerNormalization",
    "LearnedPositionalEmbedding",
    "MultiHeadAttention",
    "PositionWiseFeedForward",
    "SharedEmbedding",
    "SinusoidalPositionalEncoding",
    "scaled_dot_product_attention",
]
