"""Token-level metrics that ignore padding: accuracy and perplexity (Table 3 reports PPL).

Both accumulate over non-padding target tokens only, so a batch's padding cannot inflate accuracy
or deflate perplexity. Perplexity uses the unsmoothed cross entropy: it is exp of the per-token
negative log-likelihood, comparable across label-smoothing settings.
"""

import keras
from keras import ops

from keras_transformer.layers.masks import PAD_ID
from keras_transformer.objectives.losses import reference_logits, token_cross_entropy


class _TokenMetric(keras.metrics.Metric):
    """Accumulates a per-token quantity and the count of non-padding tokens."""

    def __init__(self, name, **kwargs):
        super().__init__(name=name, **kwargs)
        self.total = self.add_variable(shape=(), initializer="zeros", name="total")
        self.count = self.add_variable(shape=(), initializer="zeros", name="count")

    def update_state(self, y_true, y_pred, sample_weight=None):
        # The ids as Keras hands them to the loss, converted to float32: with the same ops on
        # the same inputs, XLA computes what the metrics share with the loss only once.
        y_true = ops.cast(y_true, "float32")
        real = ops.cast(ops.not_equal(y_true, PAD_ID), "float32")
        self.total.assign_add(ops.sum(self.per_token(y_true, y_pred) * real))
        self.count.assign_add(ops.sum(real))

    def per_token(self, y_true, y_pred):
        raise NotImplementedError

    def get_config(self):
        return {"name": self.name}


@keras.saving.register_keras_serializable(package="keras_transformer")
class MaskedAccuracy(_TokenMetric):
    """Fraction of non-padding target tokens whose argmax prediction is right.

    Counted as "the reference's logit is the largest": two reductions that XLA shares with the
    loss, where an argmax is a variadic reduction of its own, costly on a CPU under XLA
    (docs/DEFAULTS.md). Only an exact tie for the largest logit counts differently: as right,
    where argmax takes the first index.
    """

    def __init__(self, name="accuracy", **kwargs):
        super().__init__(name=name, **kwargs)

    def per_token(self, y_true, y_pred):
        y_pred = ops.cast(y_pred, "float32")
        largest = ops.max(y_pred, axis=-1)
        return ops.cast(reference_logits(y_true, y_pred) >= largest, "float32")

    def result(self):
        return self.total / ops.maximum(self.count, 1.0)


@keras.saving.register_keras_serializable(package="keras_transformer")
class Perplexity(_TokenMetric):
    """exp(mean negative log-likelihood) over non-padding target tokens, without smoothing."""

    def __init__(self, name="perplexity", **kwargs):
        super().__init__(name=name, **kwargs)

    def per_token(self, y_true, y_pred):
        return token_cross_entropy(y_true, y_pred)

    def result(self):
        return ops.exp(self.total / ops.maximum(self.count, 1.0))


@keras.saving.register_keras_serializable(package="keras_transformer")
class TargetTokens(keras.metrics.Metric):
    """Non-padding target tokens seen since the last reset (feeds the tokens/s read-out)."""

    def __init__(self, name="target_tokens", **kwargs):
        super().__init__(name=name, **kwargs)
        self.count = self.add_variable(shape=(), initializer="zeros", name="count")

    def update_state(self, y_true, y_pred, sample_weight=None):
        self.count.assign_add(ops.sum(ops.cast(ops.not_equal(y_true, PAD_ID), "float32")))

    def result(self):
        # A copy, not the variable: Keras keeps the training result in the epoch logs while
        # validation resets and refills this same variable.
        return ops.copy(self.count)

    def get_config(self):
        return {"name": self.name}
