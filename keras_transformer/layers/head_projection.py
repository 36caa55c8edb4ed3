"""The per-head projections of multi-head attention, §3.2.2: Q W_i^Q, K W_i^K, V W_i^V.

All h heads are projected at once, with W_i^Q stacked into one kernel `[d_model, h, depth]`,
and the result comes heads-major: `[batch, heads, length, depth]`, or, for keys,
`[batch, heads, depth, length]` (transposed, the layout `scaled_dot_product_attention` and the
decoding cache keep them in).

The bias is added in that output layout, after the relayout rather than before it, so that its
gradient is summed straight from the attention's matrix products. XLA on CPU hands such a
reduction to YNNPACK; summed from a relaid-out tensor, as `keras.layers.EinsumDense` with
`"btm,mhd->bthd"` and a transpose after it does, the reduction is left unfused and rewritten
into reduce-windows (docs/DEFAULTS.md).

The variables are those of `keras.layers.EinsumDense("btm,mhd->bthd", bias_axes="hd")`, kernel
`[d_model, heads, depth]` then bias `[heads, depth]`, so checkpoints of either load into the
other. Their initial scale is not (the paper sets none): by default (`initializer_fan="3d"`)
Glorot-uniform over the 3-D kernel counts d_model as a receptive field, fan-in h·d_model and
fan-out depth·d_model, where EinsumDense takes the matrix's d_model and h·depth. These kernels
start (h + depth)·d_model / (d_model + h·depth) times narrower in variance: 18 for `multi30k`,
36 for `base`. That came in by accident with this layer and is kept because it trains as well
or better (docs/DEFAULTS.md); `initializer_fan="matrix"`
(`TransformerConfig.qkv_initializer_fan`) gives EinsumDense's scale instead.
tests/layers/test_attention.py holds both.
"""

import keras
from keras import ops

# The ways `HeadProjection(initializer_fan=...)` and `TransformerConfig.qkv_initializer_fan`
# count the kernel's fans for Glorot-uniform.
INITIALIZER_FANS = ("3d", "matrix")


def matrix_glorot_uniform(shape, dtype=None):
    """Glorot-uniform for a `[d_model, h, depth]` kernel seen as the `[d_model, h·depth]`
    matrix: limit √(6 / (d_model + h·depth)), the scale `EinsumDense("btm,mhd->bthd")` gives."""
    d_model, heads, depth = shape
    matrix = keras.initializers.GlorotUniform()((d_model, heads * depth), dtype=dtype)
    return ops.reshape(matrix, shape)


@keras.saving.register_keras_serializable(package="keras_transformer")
class HeadProjection(keras.layers.Layer):
    """Projects `[batch, length, d_model]` into h heads of width `depth`, heads-major.

    Args:
        num_heads: h.
        depth: d_k (queries, keys) or d_v (values).
        transposed: return `[batch, heads, depth, length]` (keys, for Q·Kᵀ) instead of
            `[batch, heads, length, depth]`.
        initializer_fan: how Glorot-uniform counts the kernel's fans (see the module doc):
            "3d" (default) over the 3-D kernel `[d_model, h, depth]`, the narrower start;
            "matrix" over the `[d_model, h·depth]` matrix, `EinsumDense`'s scale.

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

    def __init__(self, num_heads, depth, transposed=False, initializer_fan="3d", **kwargs):
        super().__init__(**kwargs)
        if initializer_fan not in INITIALIZER_FANS:
            raise ValueError(
                f"initializer_fan={initializer_fan!r} must be one of {INITIALIZER_FANS}"
            )
        self.num_heads = num_heads
        self.depth = depth
        self.transposed = transposed
        self.initializer_fan = initializer_fan

    def build(self, input_shape):
        self.kernel = self.add_weight(
            name="kernel",
            shape=(input_shape[-1], self.num_heads, self.depth),
            initializer=(
                "glorot_uniform"  # over the 3-D shape: narrower, see the module doc
                if self.initializer_fan == "3d"
                else matrix_glorot_uniform
            ),
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
        config.update(
            num_heads=self.num_heads,
            depth=self.depth,
            transposed=self.transposed,
            initializer_fan=self.initializer_fan,
        )
        return config
