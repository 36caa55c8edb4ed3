"""Multi-head attention, §3.2.2.

    MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O
    head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)

with W_i^Q, W_i^K ∈ R^{d_model×d_k}, W_i^V ∈ R^{d_model×d_v}, W^O ∈ R^{h·d_v×d_model}. d_k and d_v
are separate settings because Table 3 rows (A) and (B) vary them independently of d_model / h.
"""

import keras

from keras_transformer.layers.dropout import Dropout
from keras_transformer.layers.head_projection import HeadProjection
from keras_transformer.layers.scaled_dot_product_attention import scaled_dot_product_attention


@keras.saving.register_keras_serializable(package="keras_transformer")
class MultiHeadAttention(keras.layers.Layer):
    """h heads of scaled dot-product attention with learned projections (§3.2.2).

    Args:
        num_heads: h.
        d_k: query/key width per head.
        d_v: value width per head.
        attention_dropout: dropout on the attention weights; the paper uses none.
        initializer_fan: how the Q/K/V kernels' Glorot-uniform counts fans, "3d" or "matrix"
            (`HeadProjection`); not in the paper.

    Call arguments:
        query: `[batch, query_length, d_model]`.
        key_value: `[batch, key_length, d_model]`; the same tensor as `query` for self-attention.
        attention_mask: bool, broadcastable to `[batch, heads, query_length, key_length]`
            (not named `mask`, which Keras reserves for its own implicit masking).
        training: enables dropout.

    Returns:
        `[batch, query_length, d_model]`.

    Incremental decoding splits the call in two: `project_key_value` computes a memory's keys and
    values once (the encoder output, or one new target position), and `attend` runs the attention
    of new queries over keys/values held in a cache.

    Example:
    >>> import numpy as np
    >>> attention = MultiHeadAttention(num_heads=2, d_k=4, d_v=4)
    >>> tuple(attention(np.ones((1, 3, 8), "float32"), np.ones((1, 5, 8), "float32")).shape)
    (1, 3, 8)
    """

    def __init__(self, num_heads, d_k, d_v, attention_dropout=0.0, initializer_fan="3d", **kwargs):
        super().__init__(**kwargs)
        self.num_heads = num_heads
        self.d_k = d_k
        self.d_v = d_v
        self.attention_dropout = attention_dropout
        self.initializer_fan = initializer_fan
        # Set `record_attention = True` to keep the weights of the last eager call in
        # `last_attention_weights` `[batch, heads, q, k]`: how the attention plots read them.
        self.record_attention = False
        self.last_attention_weights = None

    def build(self, query_shape, key_value_shape=None):
        d_model = query_shape[-1]
        key_value_shape = key_value_shape or query_shape

        def projection(name, depth, transposed=False):
            return HeadProjection(
                self.num_heads,
                depth,
                transposed=transposed,
                initializer_fan=self.initializer_fan,
                name=name,
                dtype=self.dtype_policy,
            )

        self.query_dense = projection("query", self.d_k)
        self.key_dense = projection("key", self.d_k, transposed=True)
        self.value_dense = projection("value", self.d_v)
        self.output_dense = keras.layers.EinsumDense(
            "bhtd,hdm->btm",
            output_shape=(None, d_model),
            bias_axes="m",
            name="output",
            dtype=self.dtype_policy,
        )
        self.dropout = Dropout(self.attention_dropout, dtype=self.dtype_policy)
        self.query_dense.build(query_shape)
        self.key_dense.build(key_value_shape)
        self.value_dense.build(key_value_shape)
        self.output_dense.build((None, self.num_heads, None, self.d_v))

    def call(self, query, key_value, attention_mask=None, training=None):
        key, value = self.project_key_value(key_value)
        return self.attend(query, key, value, attention_mask=attention_mask, training=training)

    def project_key_value(self, key_value):
        """`[batch, length, d_model]` → keys `[batch, heads, d_k, length]` (transposed, see
        `scaled_dot_product_attention`) and values `[batch, heads, length, d_v]`."""
        return self.key_dense(key_value), self.value_dense(key_value)

    def attend(self, query, key, value, attention_mask=None, training=None):
        """Attention of `query` `[batch, q, d_model]` over projected `key`/`value`."""
        output, weights = self.attention_weights_and_output(
            query, key, value, attention_mask, training
        )
        if self.record_attention:
            self.last_attention_weights = weights
        return output

    def attention_weights_and_output(self, query, key, value, attention_mask=None, training=None):
        """Like `attend`, also returning the weights `[batch, heads, q, k]` (for plots)."""
        heads, weights = scaled_dot_product_attention(
            self.query_dense(query),
            key,
            value,
            mask=attention_mask,
            dropout=self.dropout,
            training=training,
        )
        return self.output_dense(heads), weights

    def compute_output_shape(self, query_shape, key_value_shape=None):
        return query_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            num_heads=self.num_heads,
            d_k=self.d_k,
            d_v=self.d_v,
            attention_dropout=self.attention_dropout,
            initializer_fan=self.initializer_fan,
        )
        return config
