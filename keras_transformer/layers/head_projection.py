"""The per-head projections of multi-head attention, §3.2.2: Q W_i^Q, K W_i^K, V W_i^V.

All h heads are projected at once, with W_i^Q stacked into one kernel `[d_model, h, depth]`,
and the result comes heads-major: `[batch, heads, length, depth]`, or, for keys,
`[batch, heads, depth, length]` (transposed, the layout `scaled_dot_product_attention` and the
decoding cache keep them in).

The bias is added in that output layout, after the relayout rather than before it, so that its
gradient is summed straight from the attention's matrix products. XLA on CPU hands such a
reduction to YNNPACK; summed from a relaid-out tensor, as `keras.layers.EinsumDense` with
`"btm,mhd->bthd"` and a transpose after it does, the reduction is left unfused and rewritten
into reduce-windows (`benchmarks/RESULTS.md`, the `base` profile: 54 of its 118).

The variables are those of `keras.layers.EinsumDense("btm,mhd->bthd", bias_axes="hd")`, kernel
`[d_model, heads, depth]` then bias `[heads, depth]`, so checkpoints of either load into the
other. Their initial scale is not (the paper sets none): Glorot-uniform over the 3-D kernel
counts d_model as a receptive field, fan-in h·d_model and fan-out depth·d_model, where
EinsumDense takes the matrix's d_model and h·depth. These kernels start (h + depth)·d_model /
(d_model + h·depth) times narrower in variance: 18 for `multi30k`, 36 for `base` (4.2× and 6×
in spread). That came in unnoticed with this layer (commit f83039e) and was found by bisection:
at equal updates it lowers the validation loss after one Multi30k epoch (EN→FR: 6.22 to 5.93)
and speeds the first thousand updates; after 2,147 updates EN→FR's test BLEU is 52.3 against
46.0 before, while EN→DE after 2,800 ends where it did (validation 36.75 against 36.90, within
a seed's spread; docs/RESULTS.md). It is kept, and tests/test_attention.py holds it.
"""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_transformer")
class HeadProjection(keras.layers.Layer):
    """Projects `[batch, length, d_model]` into h heads of width `depth`, heads-major.

    Args:
        num_heads: h.
        depth: d_k (queries, keys) or d_v (values).
        transposed: return `[batch, heads, depth, length]` (keys, for Q·Kᵀ) instead of
            `[batch, heads, length, depth]`.

    Call arguments:
        inputs: `[batch, length, d_model]`.

    Returns:
        `[batch, heads, length, depth]`, or `[batch, heads, depth, length]` if `transposed`.

    Example:
    >>> import numpy as np
    >>> projection = HeadProjection(num_heads=2, depth=4, transposed=True)
    >>> tuple(projection(np.ones((1, 3, 8), "float32")).shape)
    (1, 2, 4, 3)
    """

    def __init__(self, num_heads, depth, transposed=False, **kwargs):
        super().__init__(**kwargs)
        self.num_heads = num_heads
        self.depth = depth
        self.transposed = transposed

    def build(self, input_shape):
        self.kernel = self.add_weight(
            name="kernel",
            shape=(input_shape[-1], self.num_heads, self.depth),
            initializer="glorot_uniform",  # over the 3-D shape: narrower, see the module doc
        )
        self.bias = self.add_weight(
            name="bias", shape=(self.num_heads, self.depth), initializer="zeros"
        )

    def call(self, inputs):
        if self.transposed:
            return ops.einsum("btm,mhd->bhdt", inputs, self.kernel) + self.bias[:, :, None]
        return ops.einsum("btm,mhd->bhtd", inputs, self.kernel) + self.bias[:, None, :]

    def compute_output_shape(self, input_shape):
        batch, length = input_shape[0], input_shape[1]
        if self.transposed:
            return (batch, self.num_heads, self.depth, length)
        return (batch, self.num_heads, length, self.depth)

    def get_config(self):
        config = super().get_config()
        config.update(num_heads=self.num_heads, depth=self.depth, transposed=self.transposed)
        return config
