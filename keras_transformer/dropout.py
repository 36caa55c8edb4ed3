"""Dropout (Srivastava et al., 2014), as §5.4 applies it ("Residual Dropout"), with a faster
random number generator where XLA compiles the training step.

The paper drops out the output of every sub-layer and the sums of embeddings and positions:
17 masks of `[batch, length, d_model]` a step in the `small` model. Keras's `Dropout` draws them
with TensorFlow's default stateless algorithm, Philox, which XLA on CPU expands into slow 64-bit
arithmetic: 15% of a `small` training step here (benchmarks/RESULTS.md has the profile).
ThreeFry gives masks of the same distribution, as reproducible from the seed, in about a third
of the time, but TensorFlow's own CPU kernels implement only Philox. So `Transformer.compile`
sets `rng_alg = "threefry"` on its dropout layers when the step is XLA-compiled, and leaves
Keras's dropout everywhere else (eager calls, other backends).

Example:
>>> import numpy as np
>>> dropout = Dropout(0.5, seed=1)
>>> kept = np.asarray(dropout(np.ones((1000,), "float32"), training=True))
>>> sorted(set(kept.tolist()))  # dropped, or scaled by 1 / (1 - rate)
[0.0, 2.0]
"""

import keras


@keras.saving.register_keras_serializable(package="keras_transformer")
class Dropout(keras.layers.Dropout):
    """`keras.layers.Dropout` that can draw its masks with another TensorFlow algorithm.

    Attributes:
        rng_alg: None for Keras's dropout, or a `tf.random.Algorithm` name ("threefry") for
            TensorFlow's stateless dropout with that algorithm (XLA-compiled code only).
    """

    rng_alg = None

    def call(self, inputs, training=False):
        if not (training and self.rate > 0 and self.rng_alg and self.noise_shape is None):
            return super().call(inputs, training=training)
        import tensorflow as tf

        return tf.nn.experimental.stateless_dropout(
            inputs,
            rate=self.rate,
            seed=tf.cast(self.seed_generator.next(), tf.int32),
            rng_alg=self.rng_alg,
        )
