"""Forced decoding: the model's log-probability of given translations, and word alignments
taken from its encoder-decoder attention over them.

`forced_decode` runs the decoder once over given target ids (teacher forcing), as fairseq's
`--score-reference` and OpenNMT-tf's `score` do. Each position's distribution is the one the
searches decode with: the log-softmax over the full vocabulary, then PAD and BOS ruled out
(`search.NEVER_GENERATED`), and for an ensemble the mean of its members' distributions
(`ensemble.mean_log_distribution`). So the log-probability
of a hypothesis a search found equals the one the search reported for it.

Alignments (`pharaoh_alignment`) read the encoder-decoder attention of the decoder layer
`alignment_layer` gives, the penultimate (the last in a one-layer model), where Garg et al.
(2019, "Jointly Learning to Align and Translate with Transformer Models") found a Transformer's
attention closest to human word alignments; of an ensemble, its first member's. Its heads are
averaged. Each target subword but EOS is aligned to the source subword it attends to most,
EOS left out; the subword links are then lifted to words (`SubwordTokenizer.word_indices`):
source word i and target word j are linked when any of their subwords are. The result is
Pharaoh's `i-j` pairs, 0-based, sorted.

Example:
>>> import numpy as np
>>> from keras_transformer import Transformer, TransformerConfig
>>> model = Transformer(TransformerConfig.preset("tiny"))
>>> result = forced_decode(model, np.array([[5, 6, 2]]), np.array([[7, 8, 2, 0]]), True)
>>> tuple(result.log_probs.shape), result.lengths.numpy().tolist(), tuple(result.attention.shape)
((1,), [3], (1, 4, 3))
"""

import contextlib
from typing import NamedTuple

import numpy as np
import tensorflow as tf

from keras_transformer.decoding.beam_search import without_tokens
from keras_transformer.decoding.ensemble import decoding_members, mean_log_distribution
from keras_transformer.decoding.search import NEVER_GENERATED
from pipelines.tokenizer import BOS_ID, EOS_ID, PAD_ID


class ForcedResult(NamedTuple):
    """log_probs: float32 `[batch]`, log P(Y | X) with EOS (if given) included; lengths: int32
    `[batch]`, |Y| (non-PAD target ids); attention: float32 `[batch, target, source]`, the
    alignment layer's encoder-decoder attention averaged over heads, or None."""

    log_probs: tf.Tensor
    lengths: tf.Tensor
    attention: tf.Tensor | None


def alignment_layer(num_layers) -> int:
    """The decoder layer whose attention aligns: the penultimate, or the only one."""
    return max(num_layers - 2, 0)


@contextlib.contextmanager
def recording(attentions):
    """Within the block, each `MultiHeadAttention` of `attentions` keeps the weights of its last
    call in `last_attention_weights` `[batch, heads, q, k]`; they are dropped on leaving."""
    for attention in attentions:
        attention.record_attention = True
    try:
        yield
    finally:
        for attention in attentions:
            attention.record_attention = False
            attention.last_attention_weights = None


def teacher_forced_inputs(target_ids):
    """The decoder's inputs for target ids `[batch, target]`: BOS, then each id but the last."""
    first = tf.fill([tf.shape(target_ids)[0], 1], BOS_ID)
    return tf.concat([first, target_ids[:, :-1]], axis=1)


def attention_weights(model, source_ids, target_ids) -> tuple[tf.Tensor, tf.Tensor]:
    """Every layer's attention in one teacher-forced pass over target ids `[batch, target]`:
    the encoder self-attention, float32 `[batch, layers, heads, source, source]`, and the
    encoder-decoder attention, `[batch, layers, heads, target, source]`, each row a query's
    distribution over the keys (the paper's Figures 3-5). Of a `Transformer`, or of an
    ensemble's first member. TensorFlow ops, so that a serving graph can return them."""
    model = decoding_members(model)[0]
    encoder = [layer.self_attention for layer in model.encoder_layers]
    cross = [layer.cross_attention for layer in model.decoder_layers]
    with recording(encoder + cross):
        model((source_ids, teacher_forced_inputs(target_ids)), training=False)
        return tuple(
            tf.cast(tf.stack([a.last_attention_weights for a in layers], axis=1), tf.float32)
            for layers in (encoder, cross)
        )


def forced_decode(model, source_ids, target_ids, with_attention=False) -> ForcedResult:
    """Scores target ids `[batch, target]` (PAD = 0 after each; end them with EOS to count its
    probability) given source ids `[batch, source]` with one full decoder pass of `model`, a
    `Transformer` or an `ensemble.Ensemble`; see the module docstring."""
    source_ids = tf.convert_to_tensor(source_ids, tf.int32)
    target_ids = tf.convert_to_tensor(target_ids, tf.int32)
    target_in = teacher_forced_inputs(target_ids)
    members = decoding_members(model)
    cross = members[0].decoder_layers[alignment_layer(len(members[0].decoder_layers))]
    with recording([cross.cross_attention] if with_attention else []):
        member_logits = [member((source_ids, target_in), training=False) for member in members]
        weights = cross.cross_attention.last_attention_weights
        attention = tf.reduce_mean(weights, axis=1) if with_attention else None
    logits = member_logits[0] if len(members) == 1 else mean_log_distribution(member_logits)
    log_probs = without_tokens(tf.nn.log_softmax(tf.cast(logits, tf.float32)), NEVER_GENERATED)
    picked = tf.gather(log_probs, target_ids, batch_dims=2)
    real = target_ids != PAD_ID
    return ForcedResult(
        tf.reduce_sum(tf.where(real, picked, 0.0), axis=1),
        tf.reduce_sum(tf.cast(real, tf.int32), axis=1),
        attention,
    )


def subword_links(attention, source_ids, target_ids) -> list[tuple[int, int]]:
    """(source position, target position) for each target subword but EOS and PAD: the source
    subword, EOS and PAD left out, that `attention` `[target, source]` weighs most."""
    source_ids, target_ids = np.asarray(source_ids), np.asarray(target_ids)
    words = (source_ids != EOS_ID) & (source_ids != PAD_ID)
    if not words.any():
        return []
    attention = np.where(words[None, : attention.shape[1]], attention, -np.inf)
    return [
        (int(np.argmax(attention[t])), t)
        for t, token in enumerate(target_ids)
        if token not in (EOS_ID, PAD_ID)
    ]


def pharaoh_alignment(links, source_words, target_words) -> str:
    """Subword `links` lifted to words (`source_words[i]`: the word of source subword i) as
    Pharaoh's sorted `i-j` pairs."""
    pairs = sorted({(source_words[s], target_words[t]) for s, t in links})
    return " ".join(f"{i}-{j}" for i, j in pairs)
