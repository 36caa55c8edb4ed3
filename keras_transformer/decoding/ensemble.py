"""Several trained Transformers of one vocabulary, decoding as one model.

At every step of greedy or beam search (§6.1) the next token's distribution is the mean of the
members' distributions: log((1/M) Σ_m p_m), what fairseq's and Marian's ensembles decode with.
The paper compares its single models against ensembles of other systems (Table 2); an ensemble
of independently trained runs is the usual next step when one model has converged.

Each member encodes the source itself and keeps its own decoding cache, so members may differ in
everything but the vocabulary: depth, width, positional encoding (Table 3's rows), weights.

Example:
>>> import numpy as np
>>> from keras_transformer import Transformer, TransformerConfig
>>> from keras_transformer.decoding.search import beam_decode
>>> config = TransformerConfig.preset("tiny")
>>> ensemble = Ensemble([Transformer(config), Transformer(config.replace(num_layers=1))])
>>> tuple(beam_decode(ensemble, np.array([[5, 6, 7, 2]]), 4, 0.6, extra_length=3).ids.shape)
(1, 4, 7)
"""

import math
from collections.abc import Sequence

import tensorflow as tf


class Ensemble(tf.Module):
    """Transformers sharing one vocabulary; `decoding`'s searches take one wherever they take a
    `Transformer`. A `tf.Module`, so that an exported SavedModel holds every member's weights.

    Args:
        members: at least two `Transformer`s with the same `vocab_size`.

    `config` is the first member's, with the smallest `max_length` of all: the positions every
    member has, so the longest input and output the ensemble can decode.
    """

    def __init__(self, members: Sequence):
        super().__init__(name="ensemble")
        self.members = tuple(members)
        if len(self.members) < 2:
            raise ValueError(f"an ensemble needs at least two members, got {len(self.members)}")
        sizes = [member.config.vocab_size for member in self.members]
        if len(set(sizes)) > 1:
            raise ValueError(f"ensemble members must share one vocabulary; vocab sizes {sizes}")
        max_length = min(member.config.max_length for member in self.members)
        self.config = self.members[0].config.replace(max_length=max_length)


def decoding_members(model) -> tuple:
    """The Transformers that decode for `model`: its members, or the model alone."""
    return model.members if isinstance(model, Ensemble) else (model,)


def mean_log_distribution(member_logits):
    """log((1/M) Σ_m softmax(logits_m)) of the members' logits (any shape, vocabulary last): a
    normalized log-distribution, which the searches' log-softmax leaves as it is."""
    log_probs = tf.stack(
        [tf.nn.log_softmax(tf.cast(logits, tf.float32)) for logits in member_logits]
    )
    return tf.reduce_logsumexp(log_probs, axis=0) - math.log(len(member_logits))


def mean_distribution(member_steps):
    """`symbols_to_logits(ids, step, caches)` over the members' step functions, one cache
    each, returning their `mean_log_distribution` as the logits."""

    def symbols_to_logits(ids, step, caches):
        outputs = [fn(ids, step, cache) for fn, cache in zip(member_steps, caches, strict=True)]
        logits = mean_log_distribution([logits for logits, _ in outputs])
        return logits, tuple(c for _, c in outputs)

    return symbols_to_logits
