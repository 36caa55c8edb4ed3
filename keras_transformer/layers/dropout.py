"""Dropout (Srivastava et al., 2014), as §5.4 applies it ("Residual Dropout"), with masks that
XLA computes inside the operations that use them.

The paper drops out the output of every sub-layer and the sums of embeddings and positions:
17 masks of `[batch, length, d_model]` a step in the `small` model, 32 in `base`. Keras's
`Dropout` draws them with TensorFlow's Philox, which XLA on CPU expands into slow 64-bit
arithmetic; TensorFlow's ThreeFry is cheaper, but XLA still compiles its 20 rounds apart from
the dropout and recomputes them for the gradients, a large share of a step's time outside the
matrix products (docs/DEFAULTS.md).

So where XLA compiles the step, the masks come from a counter-based hash instead: element i
of a call's mask is dropped when `fmix(fmix(i ^ k1) ^ k2) < rate · 2³²`, with `fmix` the 32-bit
finalizer of MurmurHash3 (two multiplications and three shifts) and k1, k2 hashed from the
layer's seed and its call counter: about a dozen integer operations an element, which XLA fuses
into the dropout and into the gradients that use the mask. Like any seeded dropout the masks
repeat with the seed and change at every call. `Transformer.compile` sets `hashed_masks` on its
dropout layers for an XLA-compiled step and leaves Keras's dropout everywhere else (eager calls,
TensorFlow graphs without XLA).

Example:
>>> import numpy as np
>>> dropout = Dropout(0.5, seed=1)
>>> dropout.hashed_masks = True
>>> kept = np.asarray(dropout(np.ones((1000,), "float32"), training=True))
>>> sorted(set(kept.tolist()))  # dropped, or scaled by 1 / (1 - rate)
[0.0, 2.0]
"""

import keras
from keras import ops

# MurmurHash3's finalizer: (shift, multiplier) twice, then a last shift. And the golden ratio's
# 32 bits, to keep the keys of small seeds apart.
FMIX_STEPS = ((16, 0x85EBCA6B), (13, 0xC2B2AE35))
FMIX_LAST_SHIFT = 16
GOLDEN = 0x9E3779B9


def _uint32(value):
    return ops.convert_to_tensor(value, "uint32")


def fmix(h):
    """MurmurHash3's 32-bit finalizer: every input bit flips each output bit with p ≈ ½."""
    for shift, multiplier in FMIX_STEPS:
        h = ops.bitwise_xor(h, ops.right_shift(h, _uint32(shift)))
        h = ops.multiply(h, _uint32(multiplier))
    return ops.bitwise_xor(h, ops.right_shift(h, _uint32(FMIX_LAST_SHIFT)))


def hashed_uniform_bits(like, seed):
    """uint32 bits shaped like `like`, a hash of each element's index keyed by `seed` ([2]).

    Both seed words enter both keys, so that two seeds give unrelated masks rather than the same
    mask with its indices permuted.
    """
    seed = ops.cast(seed, "uint32")
    first_key = fmix(ops.bitwise_xor(seed[0], fmix(ops.add(seed[1], _uint32(GOLDEN)))))
    second_key = fmix(ops.add(first_key, _uint32(GOLDEN)))
    index = ops.cast(ops.arange(ops.size(like), dtype="int32"), "uint32")
    bits = fmix(ops.bitwise_xor(fmix(ops.bitwise_xor(index, first_key)), second_key))
    return ops.reshape(bits, ops.shape(like))


@keras.saving.register_keras_serializable(package="keras_transformer")
class Dropout(keras.layers.Dropout):
    """`keras.layers.Dropout` that can draw its masks from a hash XLA fuses.

    Attributes:
        hashed_masks: False for Keras's dropout; True for masks from `hashed_uniform_bits`,
            meant for XLA-compiled code, which fuses the hash's dozen operations.
    """

    hashed_masks = False

    def call(self, inputs, training=False):
        if not (training and self.rate > 0 and self.hashed_masks and self.noise_shape is None):
            return super().call(inputs, training=training)
        bits = hashed_uniform_bits(inputs, self.seed_generator.next())
        threshold = min(round(self.rate * 2**32), 2**32 - 1)  # a rate just below 1 rounds up
        keep = ops.greater_equal(bits, _uint32(threshold))
        scale = ops.cast(1.0 / (1.0 - self.rate), inputs.dtype)
        return ops.where(keep, inputs * scale, ops.zeros_like(inputs))
