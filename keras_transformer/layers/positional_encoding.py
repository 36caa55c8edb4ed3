"""Positional encodings, §3.5, and the learned alternative of Table 3 row (E).

    PE(pos, 2i)   = sin(pos / 10000^(2i / d_model))
    PE(pos, 2i+1) = cos(pos / 10000^(2i / d_model))

Positions count from 0 and sines and cosines interleave (even dimensions sine, odd cosine), as
the formula says. `layout="halves"` lays the same sinusoids out as all sines, then all cosines
([sin | cos]): tensor2tensor's and Marian's layout, which pretrained OPUS-MT models were trained
with. Either layout is a fixed permutation of the other's dimensions.

The sinusoids are computed from the positions at call time, so they have no
length limit: §3.5 chose them because they "may allow the model to extrapolate to sequence lengths
longer than the ones encountered during training".

Both layers add the encoding to their input and take a `start_index`, so that one decoding step
at position t gets PE(t).
"""

import math

import keras
from keras import ops

LAYOUTS = ("interleaved", "halves")


def _positions(inputs, start_index):
    return ops.arange(ops.shape(inputs)[1], dtype="int32") + ops.cast(start_index, "int32")


@keras.saving.register_keras_serializable(package="keras_transformer")
class SinusoidalPositionalEncoding(keras.layers.Layer):
    """Adds the fixed sinusoidal encoding of §3.5 to `[batch, length, d_model]` embeddings.

    Args:
        layout: "interleaved" (§3.5: dimension 2i sine, 2i+1 cosine) or "halves" (dimension i
            sine, d_model/2 + i cosine).

    Call arguments:
        inputs: `[batch, length, d_model]`, d_model even.
        start_index: position of the first element (0, or the decoding step).

    Returns:
        `inputs + PE[start_index : start_index + length]`.

    Example:
    >>> import numpy as np
    >>> out = SinusoidalPositionalEncoding()(np.zeros((1, 2, 4), "float32"))
    >>> np.round(ops.convert_to_numpy(out)[0, 1], 4)  # sin(1), cos(1), sin(.01), cos(.01)
    array([0.8415, 0.5403, 0.01  , 1.    ], dtype=float32)
    >>> out = SinusoidalPositionalEncoding(layout="halves")(np.zeros((1, 2, 4), "float32"))
    >>> np.round(ops.convert_to_numpy(out)[0, 1], 4)  # sin(1), sin(.01), cos(1), cos(.01)
    array([0.8415, 0.01  , 0.5403, 1.    ], dtype=float32)
    """

    def __init__(self, layout="interleaved", **kwargs):
        super().__init__(**kwargs)
        if layout not in LAYOUTS:
            raise ValueError(f"layout={layout!r} must be one of {LAYOUTS}")
        self.layout = layout

    def build(self, input_shape):
        if input_shape[-1] % 2:
            raise ValueError(f"sinusoidal encoding needs an even d_model, got {input_shape[-1]}")

    def call(self, inputs, start_index=0):
        return inputs + ops.cast(self.encoding(inputs, start_index), inputs.dtype)

    def encoding(self, inputs, start_index=0):
        """PE for the positions of `inputs`: `[length, d_model]` float32."""
        d_model = ops.shape(inputs)[-1]
        positions = ops.cast(_positions(inputs, start_index), "float32")
        # 1 / 10000^(2i / d_model) for i = 0 .. d_model/2 - 1.
        inverse_frequencies = ops.exp(
            ops.arange(0, d_model, 2, dtype="float32") * (-math.log(10000.0) / d_model)
        )
        angles = positions[:, None] * inverse_frequencies[None, :]
        if self.layout == "halves":
            return ops.concatenate([ops.sin(angles), ops.cos(angles)], axis=-1)
        interleaved = ops.stack([ops.sin(angles), ops.cos(angles)], axis=-1)
        return ops.reshape(interleaved, (-1, d_model))

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(layout=self.layout)
        return config


@keras.saving.register_keras_serializable(package="keras_transformer")
class LearnedPositionalEmbedding(keras.layers.Layer):
    """Adds a trained embedding per position (Table 3 row E, after Gehring et al. 2017).

    Args:
        max_length: number of positions with an embedding; longer inputs cannot be encoded.

    Call arguments:
        inputs: `[batch, length, d_model]`.
        start_index: position of the first element.

    Returns:
        `inputs + P[start_index : start_index + length]`.

    Example:
    >>> import numpy as np
    >>> tuple(LearnedPositionalEmbedding(max_length=16)(np.zeros((1, 3, 8), "float32")).shape)
    (1, 3, 8)
    """

    def __init__(self, max_length, **kwargs):
        super().__init__(**kwargs)
        self.max_length = max_length

    def build(self, input_shape):
        self.position_embeddings = self.add_weight(
            name="position_embeddings",
            shape=(self.max_length, input_shape[-1]),
            # Same scale as the sinusoids' entries, so swapping the two changes nothing else.
            initializer=keras.initializers.RandomUniform(-1.0, 1.0),
        )

    def call(self, inputs, start_index=0):
        embeddings = ops.take(self.position_embeddings, _positions(inputs, start_index), axis=0)
        return inputs + ops.cast(embeddings, inputs.dtype)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(max_length=self.max_length)
        return config
