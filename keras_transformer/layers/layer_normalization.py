"""Layer normalization (Ba et al., 2016), the "Norm" of every "Add & Norm" (§3.1).

    LayerNorm(x) = γ · (x - μ) / √(σ² + ε) + β,  μ and σ² over the d_model features of a position

The same layer and weights as `keras.layers.LayerNormalization` over the last axis, computed so
that XLA on CPU fuses its reductions. XLA's CPU compiler rewrites every floating-point reduction
over an axis longer than 32 into an unfused reduce-window of 32 and a second reduce (for
accuracy), which makes the statistics and their gradients a noticeable part of a training
step (docs/DEFAULTS.md). Reducing over `[d_model / 32, 32]` instead, two axes of at most 32,
gives the same μ and σ² and keeps each reduction fused with what produces it.

Example:
>>> import numpy as np
>>> x = np.random.default_rng(0).normal(size=(2, 3, 64)).astype("float32")
>>> layer = LayerNormalization(epsilon=1e-6)
>>> reference = keras.layers.LayerNormalization(epsilon=1e-6)
>>> bool(np.allclose(layer(x), reference(x), atol=1e-5))
True
"""

import keras
from keras import ops

# XLA's CPU tree-reduction rewrite leaves alone reductions whose every axis is at most this long.
XLA_CPU_REDUCE_WINDOW = 32


@keras.saving.register_keras_serializable(package="keras_transformer")
class LayerNormalization(keras.layers.LayerNormalization):
    """`keras.layers.LayerNormalization` over the last axis, with reductions XLA fuses on CPU.

    Takes the arguments of `keras.layers.LayerNormalization` with `axis=-1` and no RMS scaling.
    """

    def call(self, inputs):
        features = inputs.shape[-1]
        plain = self.rms_scaling or not (self.center and self.scale) or self.axis not in (-1, [-1])
        groupable = features and features > XLA_CPU_REDUCE_WINDOW
        if plain or not groupable or features % XLA_CPU_REDUCE_WINDOW:
            return super().call(inputs)
        x = ops.cast(inputs, "float32")
        grouped = ops.reshape(
            x, (*ops.shape(x)[:-1], features // XLA_CPU_REDUCE_WINDOW, XLA_CPU_REDUCE_WINDOW)
        )
        mean = ops.mean(grouped, axis=(-2, -1), keepdims=True)
        centered = grouped - mean
        variance = ops.mean(ops.square(centered), axis=(-2, -1), keepdims=True)
        normalized = ops.reshape(centered * ops.rsqrt(variance + self.epsilon), ops.shape(x))
        outputs = normalized * ops.cast(self.gamma, "float32") + ops.cast(self.beta, "float32")
        return ops.cast(outputs, self.compute_dtype)
