"""Scaled dot-product attention, Eq. 1 of §3.2.1.

    Attention(Q, K, V) = softmax(Q Kᵀ / √d_k) V

Scores and softmax are computed in float32 even under mixed precision, so that masked positions
get exactly zero weight and long rows do not lose precision.

Keys come transposed, `[batch, heads, d_k, key_length]`: the layout in which both products are
plain batched matrix products. A decoding cache kept in this layout is written in place, one
position a step, and never transposed again (XLA otherwise copies every cached key and value
into the product's layout at every step).

Example:
>>> import numpy as np
>>> q = v = np.ones((1, 1, 2, 4), "float32")  # [batch, heads, length, depth]
>>> k = np.ones((1, 1, 4, 2), "float32")  # [batch, heads, depth, length]: Kᵀ
>>> output, weights = scaled_dot_product_attention(q, k, v)
>>> tuple(output.shape), tuple(weights.shape)
((1, 1, 2, 4), (1, 1, 2, 2))
"""

import math

from keras import ops


def scaled_dot_product_attention(query, key, value, mask=None, dropout=None, training=None):
    """Eq. 1 over several heads at once.

    Args:
        query: `[batch, heads, query_length, d_k]`.
        key: `[batch, heads, d_k, key_length]` (transposed).
        value: `[batch, heads, key_length, d_v]`.
        mask: bool, broadcastable to `[batch, heads, query_length, key_length]`; `False` marks
            positions that may not be attended to: their scores are set to the most negative
            float32, the finite stand-in for -∞ that cannot turn a row into NaN.
        dropout: optional `Dropout` layer on the attention weights (not in the paper).
        training: passed to `dropout`.

    Returns:
        `(output, weights)`: output `[batch, heads, query_length, d_v]` in the query's dtype and
        weights `[batch, heads, query_length, key_length]` in float32.
    """
    depth = ops.shape(query)[-1]
    scores = ops.matmul(query, key)
    scores = ops.cast(scores, "float32") / math.sqrt(depth)
    if mask is not None:
        scores = ops.where(mask, scores, ops.cast(-3.4028235e38, "float32"))
    if scores.shape[-1] == 1:
        # One key takes all the weight (softmax over one position is 1), which Keras's softmax
        # warns about as a likely mistake; here it is the first step of uncached decoding.
        weights = ops.ones_like(scores)
    else:
        weights = ops.softmax(scores, axis=-1)
    dropped = dropout(weights, training=training) if dropout is not None else weights
    output = ops.matmul(ops.cast(dropped, value.dtype), value)
    return output, weights
