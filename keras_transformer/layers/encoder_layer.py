"""One layer of the encoder stack, §3.1.

"Each layer has two sub-layers. The first is a multi-head self-attention mechanism, and the
second is a simple, position-wise fully connected feed-forward network. We employ a residual
connection around each of the two sub-layers, followed by layer normalization."
"""

import keras

from keras_transformer.layers.add_and_norm import AddAndNorm
from keras_transformer.layers.multi_head_attention import MultiHeadAttention
from keras_transformer.layers.position_wise_feed_forward import PositionWiseFeedForward


@keras.saving.register_keras_serializable(package="keras_transformer")
class EncoderLayer(keras.layers.Layer):
    """Self-attention and feed-forward sub-layers, each wrapped in Add & Norm.

    Args:
        num_heads, d_k, d_v: multi-head attention settings (§3.2.2).
        d_ff: feed-forward inner width (§3.3).
        residual_dropout: P_drop (§5.4).
        attention_dropout, relu_dropout: extra dropouts, not in the paper (default 0).
        ffn_activation: the feed-forward network's activation (`PositionWiseFeedForward`).
        layer_norm_epsilon: layer normalization ε.
        initializer_fan: how the Q/K/V kernels' Glorot-uniform counts fans, "3d" or "matrix"
            (`HeadProjection`); not in the paper.

    Call arguments:
        inputs: `[batch, source_length, d_model]`.
        attention_mask: bool, broadcastable to `[batch, heads, source_length, source_length]`.
        training: enables dropout.

    Returns:
        `[batch, source_length, d_model]`.

    Example:
    >>> import numpy as np
    >>> layer = EncoderLayer(num_heads=2, d_k=4, d_v=4, d_ff=16, residual_dropout=0.1)
    >>> tuple(layer(np.ones((2, 5, 8), "float32")).shape)
    (2, 5, 8)
    """

    def __init__(
        self,
        num_heads,
        d_k,
        d_v,
        d_ff,
        residual_dropout,
        attention_dropout=0.0,
        relu_dropout=0.0,
        ffn_activation="relu",
        layer_norm_epsilon=1e-6,
        initializer_fan="3d",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_heads = num_heads
        self.d_k = d_k
        self.d_v = d_v
        self.d_ff = d_ff
        self.residual_dropout = residual_dropout
        self.attention_dropout = attention_dropout
        self.relu_dropout = relu_dropout
        self.ffn_activation = ffn_activation
        self.layer_norm_epsilon = layer_norm_epsilon
        self.initializer_fan = initializer_fan

    def build(self, input_shape):
        self.self_attention = MultiHeadAttention(
            self.num_heads,
            self.d_k,
            self.d_v,
            self.attention_dropout,
            initializer_fan=self.initializer_fan,
            name="self_attention",
            dtype=self.dtype_policy,
        )
        self.self_attention_norm = AddAndNorm(
            self.residual_dropout,
            self.layer_norm_epsilon,
            name="self_attention_add_and_norm",
            dtype=self.dtype_policy,
        )
        self.feed_forward = PositionWiseFeedForward(
            self.d_ff,
            self.relu_dropout,
            self.ffn_activation,
            name="feed_forward",
            dtype=self.dtype_policy,
        )
        self.feed_forward_norm = AddAndNorm(
            self.residual_dropout,
            self.layer_norm_epsilon,
            name="feed_forward_add_and_norm",
            dtype=self.dtype_policy,
        )
        for layer in (
            self.self_attention,
            self.self_attention_norm,
            self.feed_forward,
            self.feed_forward_norm,
        ):
            layer.build(input_shape)

    def call(self, inputs, attention_mask=None, training=None):
        attended = self.self_attention(
            inputs, inputs, attention_mask=attention_mask, training=training
        )
        x = self.self_attention_norm(inputs, attended, training=training)
        return self.feed_forward_norm(x, self.feed_forward(x, training=training), training=training)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            num_heads=self.num_heads,
            d_k=self.d_k,
            d_v=self.d_v,
            d_ff=self.d_ff,
            residual_dropout=self.residual_dropout,
            attention_dropout=self.attention_dropout,
            relu_dropout=self.relu_dropout,
            ffn_activation=self.ffn_activation,
            layer_norm_epsilon=self.layer_norm_epsilon,
            initializer_fan=self.initializer_fan,
        )
        return config
