"""Position-wise feed-forward network, Eq. 2 of §3.3.

    FFN(x) = max(0, x W_1 + b_1) W_2 + b_2

applied to each position separately and identically, with inner width d_ff. The paper's
activation is the ReLU; pretrained models made by others use another one in its place (OPUS-MT's
Marian models: swish, x·σ(x)), so the activation is a setting whose default is the paper's.
"""

import keras

from keras_transformer.layers.dropout import Dropout


@keras.saving.register_keras_serializable(package="keras_transformer")
class PositionWiseFeedForward(keras.layers.Layer):
    """Two linear transformations with a ReLU in between (Eq. 2).

    Args:
        d_ff: inner width (2048 in the base model).
        relu_dropout: dropout after the activation; not in the paper, default 0.
        activation: "relu" (Eq. 2), "swish" or "gelu" (exact, erf-based).

    Call arguments:
        inputs: `[batch, length, d_model]`.
        training: enables dropout.

    Returns:
        `[batch, length, d_model]`.

    Example:
    >>> import numpy as np
    >>> tuple(PositionWiseFeedForward(d_ff=16)(np.ones((2, 3, 8), "float32")).shape)
    (2, 3, 8)
    """

    def __init__(self, d_ff, relu_dropout=0.0, activation="relu", **kwargs):
        super().__init__(**kwargs)
        self.d_ff = d_ff
        self.relu_dropout = relu_dropout
        self.activation = activation

    def build(self, input_shape):
        d_model = input_shape[-1]
        self.inner = keras.layers.Dense(
            self.d_ff, activation=self.activation, name="inner", dtype=self.dtype_policy
        )
        self.dropout = Dropout(self.relu_dropout, dtype=self.dtype_policy)
        self.outer = keras.layers.Dense(d_model, name="outer", dtype=self.dtype_policy)
        self.inner.build(input_shape)
        self.outer.build((*input_shape[:-1], self.d_ff))

    def call(self, inputs, training=None):
        return self.outer(self.dropout(self.inner(inputs), training=training))

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(d_ff=self.d_ff, relu_dropout=self.relu_dropout, activation=self.activation)
        return config
