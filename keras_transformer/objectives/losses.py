"""The training objective: cross entropy with label smoothing, §5.4 ("Label Smoothing").

"During training, we employed label smoothing of value ε_ls = 0.1. This hurts perplexity, as the
model learns to be more unsure, but improves accuracy and BLEU score."

The smoothed target puts 1 - ε on the reference token and spreads ε uniformly over the whole
vocabulary, q = (1 - ε)·onehot(y) + ε/V, as in Szegedy et al. (2016) and Keras's own
`label_smoothing`. Padding positions (id 0) carry no loss; the loss is the mean over the real
tokens of the whole global batch, also when it is split across replicas (see
`global_token_count`). Under gradient accumulation each micro-batch's loss is its own mean, and
the optimizer weights each micro-batch's gradient by its token count (`record_tokens`), so the
update is that of the mean over all the micro-batches' tokens.
"""

import keras
from keras import ops

from keras_transformer.layers.masks import PAD_ID


def reference_logits(target_ids, logits):
    """x_y, each position's logit of its reference token: `[batch, length]`.

    A masked sum rather than a gather: XLA fuses the comparison into the reduction, and the
    gradient is elementwise (a gather is differentiated by a scatter into a dense zero tensor of
    the logits' size). Written once, so that the loss and the metrics compute it alike and XLA
    computes it once for all of them.
    """
    one_hot = ops.one_hot(ops.cast(target_ids, "int32"), logits.shape[-1], dtype=logits.dtype)
    return ops.sum(one_hot * logits, axis=-1)


def token_cross_entropy(target_ids, logits, label_smoothing=0.0):
    """Per-token smoothed cross entropy `[batch, length]` (zero where `target_ids` is padding).

    With Σ_v q_v = 1 and log p_v = x_v - logsumexp(x), the cross entropy needs no log-softmax:
    H(q, p) = -Σ_v q_v log p_v = logsumexp(x) - Σ_v q_v x_v, and with q = (1 - ε)·onehot(y) + ε/V,
    Σ_v q_v x_v = (1 - ε)·x_y + ε·mean(x). Three reductions over the logits, with the gradient
    softmax(x) - q elementwise; the unsmoothed loss (perplexity's) shares the first two.
    """
    logits = ops.cast(logits, "float32")
    loss = ops.logsumexp(logits, axis=-1) - (1.0 - label_smoothing) * reference_logits(
        target_ids, logits
    )
    if label_smoothing:
        loss -= label_smoothing * ops.mean(logits, axis=-1)
    return ops.where(ops.not_equal(target_ids, PAD_ID), loss, 0.0)


def global_token_count(tokens):
    """The real tokens of the whole global batch, summed over replicas under `tf.distribute`.

    Each replica returns its loss sum divided by this global count; the replicas' gradients are
    summed, so the update is exactly that of the global batch's per-token mean, as on one device.
    (A replica's mean over its own tokens would weigh every replica equally, whatever its token
    count. Keras scales losses by 1/replicas only inside its mean reductions, not for a loss
    that reduces itself, as this one does.)
    """
    if keras.backend.backend() != "tensorflow":
        return tokens
    import tensorflow as tf

    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync == 1:
        return tokens
    return context.all_reduce(tf.distribute.ReduceOp.SUM, tokens)


@keras.saving.register_keras_serializable(package="keras_transformer")
class LabelSmoothedCrossEntropy(keras.losses.Loss):
    """Mean smoothed cross entropy over the non-padding target tokens of a batch.

    Args:
        label_smoothing: ε_ls (0.1 in the paper).
        record_tokens: optional callable given each batch's non-padding target token count
            (global across replicas): the optimizer's `record_tokens` under gradient
            accumulation, which weights each micro-batch's gradient by it
            (`optimizer.TokenWeightedAccumulation`). A live link, not part of `get_config`.

    Call arguments:
        y_true: int `[batch, length]` target ids, 0 = padding.
        y_pred: logits `[batch, length, vocab]`.

    Example:
    >>> import numpy as np
    >>> loss = LabelSmoothedCrossEntropy(label_smoothing=0.0)
    >>> round(float(loss(np.array([[1, 0]]), np.zeros((1, 2, 4), "float32"))), 4)  # log 4
    1.3863
    """

    def __init__(
        self,
        label_smoothing=0.1,
        name="label_smoothed_cross_entropy",
        record_tokens=None,
        **kwargs,
    ):
        super().__init__(name=name, reduction="none", **kwargs)
        self.label_smoothing = label_smoothing
        self.record_tokens = record_tokens

    def call(self, y_true, y_pred):
        losses = token_cross_entropy(y_true, y_pred, self.label_smoothing)
        tokens = global_token_count(ops.sum(ops.cast(ops.not_equal(y_true, PAD_ID), "float32")))
        if self.record_tokens is not None:
            self.record_tokens(tokens)
        return ops.sum(losses) / ops.maximum(tokens, 1.0)

    def get_config(self):
        return {"label_smoothing": self.label_smoothing, "name": self.name}
