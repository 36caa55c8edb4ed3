"""The residual connection around every sub-layer, "Add & Norm" in Figure 1 (§3.1, §5.4).

    output = LayerNorm(x + Dropout(Sublayer(x)))

§3.1 gives LayerNorm(x + Sublayer(x)); §5.4 adds dropout "to the output of each sub-layer, before
it is added to the sub-layer input and normalized". This is the paper's post-norm arrangement.
"""

import keras

from keras_transformer.layers.dropout import Dropout
from keras_transformer.layers.layer_normalization import LayerNormalization


@keras.saving.register_keras_serializable(package="keras_transformer")
class AddAndNorm(keras.layers.Layer):
    """Residual dropout, residual add and layer normalization.

    Args:
        residual_dropout: P_drop (0.1 in the base model).
        epsilon: layer normalization ε.

    Call arguments:
        residual: the sub-layer input x, `[batch, length, d_model]`.
        sublayer_output: Sublayer(x), same shape.
        training: enables dropout.

    Returns:
        `[batch, length, d_model]`.

    Example:
    >>> import numpy as np
    >>> x = np.random.rand(1, 2, 8).astype("float32")
    >>> tuple(AddAndNorm(residual_dropout=0.1)(x, x).shape)
    (1, 2, 8)
    """

    def __init__(self, residual_dropout, epsilon=1e-6, **kwargs):
        super().__init__(**kwargs)
        self.residual_dropout = residual_dropout
        self.epsilon = epsilon

    def build(self, residual_shape, sublayer_output_shape=None):
        self.dropout = Dropout(self.residual_dropout, dtype=self.dtype_policy)
        self.layer_norm = LayerNormalization(
            epsilon=self.epsilon, name="layer_norm", dtype=self.dtype_policy
        )
        self.layer_norm.build(residual_shape)

    def call(self, residual, sublayer_output, training=None):
        return self.layer_norm(residual + self.dropout(sublayer_output, training=training))

    def compute_output_shape(self, residual_shape, sublayer_output_shape=None):
        return residual_shape

    def get_config(self):
        config = super().get_config()
        config.update(residual_dropout=self.residual_dropout, epsilon=self.epsilon)
        return config
