"""Beam search with a length penalty and early termination, §6.1.

"We used beam search with a beam size of 4 and length penalty α = 0.6 ... We set the maximum output
length during inference to input length + 50, but terminate early when possible."

The length penalty is GNMT's (Wu et al., 2016): a hypothesis Y of |Y| tokens (its EOS included)
with log-probability log P(Y) scores

    score(Y) = log P(Y) / lp(Y),    lp(Y) = ((5 + |Y|) / 6)^α.

The search is model-agnostic: it calls `symbols_to_logits_fn(ids, step, cache) -> (logits, cache)`
with the token at position `step` of every hypothesis (`[batch * beam]`, BOS at step 0) and a
cache whose tensors have a leading `batch * beam` axis (hypothesis `k` of sentence `b` at index
`b * beam + k`). When hypotheses are re-ranked, every tensor of the cache is gathered along that
axis; state that is the same for all hypotheses of a sentence (the encoder output) belongs in the
function's closure, not in the cache, so it is never copied.

Every shape in the loop is fixed (`max_decode_length` + 1 positions, preallocated), so the search
runs in a `tf.while_loop`, inside a SavedModel, and under XLA. Given the axis along which each
cache tensor holds positions (`position_axes`), the cache instead grows by blocks of
`CACHE_BLOCK` positions, one loop per block: re-ranking then gathers, and attention reads, the
blocks written so far rather than the whole preallocated cache, which would cost a step as much
as the model's matrix products.

Alive and finished hypotheses are kept apart (as in tensor2tensor): each step extends the `beam`
alive ones by every token, keeps the `2 × beam` best candidates, sends those ending in EOS (or at
their sentence's maximum length) to the finished set, ranked by penalized score, and keeps the best
`beam` others alive. The search ends early once no alive hypothesis of any sentence can still beat
the worst of its sentence's `beam` finished ones: log-probabilities only fall as a hypothesis
grows, so the best an alive one can reach is its log-probability over the largest penalty still
possible. Stopping then loses nothing that running to the maximum length would have found; the
search itself is still a beam search, which never scores an EOS ending outside a step's `2 × beam`
candidates.

Example:
>>> import tensorflow as tf
>>> def uniform(ids, step, cache):  # every one of 5 tokens equally likely, at every step
...     return tf.zeros([tf.shape(ids)[0], 5]), cache
>>> result = beam_search(uniform, tf.ones([2], tf.int32), (), beam_size=3, max_decode_length=4)
>>> result.ids.shape, result.scores.shape
(TensorShape([2, 3, 4]), TensorShape([2, 3]))
"""

from typing import Any, NamedTuple

import tensorflow as tf

from pipelines.tokenizer import EOS_ID, PAD_ID

# Large and finite: -inf would turn "-inf - -inf" into NaN in the score arithmetic.
NEG_INF = -1e9
# The cache grows along its positions by blocks of this many: a step reorders, and attends
# over, the blocks written so far, not the whole preallocated cache.
CACHE_BLOCK = 16


def without_tokens(scores, token_ids, vocab_axis=-1):
    """`scores` `[rows, vocab]` (or `[vocab, rows]` with `vocab_axis=0`) with the entries of
    `token_ids` set to `NEG_INF`: never chosen, and outside a log-softmax's normalization."""
    if not token_ids:
        return scores
    vocabulary = tf.range(tf.shape(scores)[vocab_axis])
    banned = tf.reduce_any(vocabulary[:, None] == tf.constant(token_ids, tf.int32), axis=1)
    return tf.where(banned[:, None] if vocab_axis == 0 else banned, NEG_INF, scores)


def length_penalty(length, alpha):
    """lp(Y) = ((5 + |Y|) / 6)^α for a hypothesis of `length` tokens (GNMT; §6.1 uses α = 0.6)."""
    return tf.pow((5.0 + tf.cast(length, tf.float32)) / 6.0, tf.cast(alpha, tf.float32))


class BeamSearchState(NamedTuple):
    """The loop variables. `ids` hold BOS at position 0 and PAD after each hypothesis' end."""

    step: tf.Tensor  # int32 scalar: tokens generated so far
    alive_ids: tf.Tensor  # int32 [batch, beam, max_decode_length + 1]
    alive_log_probs: tf.Tensor  # float32 [batch, beam], best first; NEG_INF for no hypothesis
    finished_ids: tf.Tensor  # int32 [batch, beam, max_decode_length + 1]
    finished_scores: tf.Tensor  # float32 [batch, beam], penalized, best first; NEG_INF if empty
    finished_log_probs: tf.Tensor  # float32 [batch, beam]
    finished_lengths: tf.Tensor  # int32 [batch, beam]: tokens generated, EOS included
    cache: Any  # nested tensors with a leading batch * beam axis


class BeamSearchResult(NamedTuple):
    """The `beam` best hypotheses of each sentence, best first.

    ids: int32 `[batch, beam, max_decode_length]`, the generated tokens (no BOS), PAD after the
        end; a hypothesis that reached its sentence's maximum length has no EOS.
    scores: float32 `[batch, beam]`, log P(Y) / lp(Y).
    log_probs: float32 `[batch, beam]`, log P(Y).
    lengths: int32 `[batch, beam]`, |Y|, EOS included.
    """

    ids: tf.Tensor
    scores: tf.Tensor
    log_probs: tf.Tensor
    lengths: tf.Tensor


def write_at(ids, position, tokens):
    """`ids[..., position] = tokens` with fixed shapes (a select, not a scatter)."""
    at_position = tf.range(tf.shape(ids)[-1]) == position
    return tf.where(at_position, tokens[..., None], ids)


def _gather_hypotheses(values, indices):
    """`values[b, indices[b, k]]` for tensors `[batch, n, ...]` and indices `[batch, k]`."""
    return tf.gather(values, indices, batch_dims=1)


def _reorder_cache(cache, parents, beam_size):
    """Gathers the cache rows of each kept hypothesis' parent (`parents`: `[batch, beam]`)."""
    batch_offsets = tf.range(tf.shape(parents)[0])[:, None] * beam_size
    rows = tf.reshape(parents + batch_offsets, [-1])
    return tf.nest.map_structure(lambda t: tf.gather(t, rows), cache)


def _block_ends(position_axes, max_decode_length):
    """The steps at which the cache grows by a block: `CACHE_BLOCK`, 2 `CACHE_BLOCK`, ... up to
    `max_decode_length`; one block of all positions without position axes or a static length."""
    if position_axes is None or not isinstance(max_decode_length, int):
        return [max_decode_length]
    return [
        min(end, max_decode_length)
        for end in range(CACHE_BLOCK, max_decode_length + CACHE_BLOCK, CACHE_BLOCK)
    ]


def _positions(cache, position_axes, start, end):
    """Each tensor of `cache` cut to positions `start` to `end` along its position axis."""
    if position_axes is None:
        return cache
    return tf.nest.map_structure(
        lambda t, axis: t if axis is None else t[(slice(None),) * axis + (slice(start, end),)],
        cache,
        position_axes,
    )


def _grown(cache, initial_cache, position_axes, start, end):
    """`cache` with the initial (unwritten) positions `start` to `end` appended."""
    added = _positions(initial_cache, position_axes, start, end)
    return tf.nest.map_structure(
        lambda t, more, axis: t if axis is None else tf.concat([t, more], axis),
        cache,
        added,
        position_axes,
    )


def beam_search(
    symbols_to_logits_fn,
    initial_ids,
    initial_cache,
    beam_size=4,
    alpha=0.6,
    max_decode_length=50,
    max_lengths=None,
    eos_id=EOS_ID,
    banned_ids=(),
    position_axes=None,
) -> BeamSearchResult:
    """Batched beam search; see the module docstring.

    Args:
        symbols_to_logits_fn: `(ids [batch*beam], step, cache) -> (logits [batch*beam, vocab],
            cache)`.
        initial_ids: int `[batch]`, the first decoder input (BOS).
        initial_cache: nested tensors with a leading `batch * beam` axis (may be empty).
        beam_size: hypotheses kept per sentence: a Python int fixes the shapes (as XLA needs);
            a scalar int32 tensor lets a serving signature take it as an input.
        alpha: α of the length penalty; 0 ranks by log-probability alone.
        max_decode_length: int, the most tokens any hypothesis may have (fixes the buffers).
        max_lengths: optional int `[batch]`, each sentence's own limit (≤ `max_decode_length`);
            §6.1 sets it to the input length + 50.
        eos_id: the token that ends a hypothesis.
        banned_ids: tokens never generated (`without_tokens`).
        position_axes: optional nest matching `initial_cache`: for each tensor, the axis of
            the positions `symbols_to_logits_fn` writes at `step`, or None. The cache then
            grows by blocks of `CACHE_BLOCK` positions (a loop per block, each of fixed
            shapes), and `symbols_to_logits_fn` must take it of any length from `step + 1`
            on; the results are the same.

    Returns:
        A `BeamSearchResult`.
    """
    initial_ids = tf.convert_to_tensor(initial_ids, tf.int32)
    batch_size = tf.shape(initial_ids)[0]
    buffer_length = max_decode_length + 1
    if max_lengths is None:
        max_lengths = tf.fill([batch_size], max_decode_length)
    max_lengths = tf.minimum(tf.cast(max_lengths, tf.int32), max_decode_length)

    def step_fn(state: BeamSearchState) -> BeamSearchState:
        step = state.step
        logits, cache = symbols_to_logits_fn(
            tf.reshape(state.alive_ids[:, :, step], [-1]), step, state.cache
        )
        vocab_size = logits.shape[-1] or tf.shape(logits)[-1]
        log_probs = tf.nn.log_softmax(without_tokens(tf.cast(logits, tf.float32), banned_ids))
        log_probs = tf.reshape(log_probs, [batch_size, beam_size, vocab_size])
        candidates = tf.reshape(
            state.alive_log_probs[:, :, None] + log_probs, [batch_size, beam_size * vocab_size]
        )
        if isinstance(vocab_size, int) and isinstance(beam_size, int):
            candidate_count = min(2 * beam_size, beam_size * vocab_size)  # static, for XLA
        else:
            candidate_count = tf.minimum(2 * beam_size, beam_size * vocab_size)
        top_log_probs, top_indices = tf.math.top_k(candidates, k=candidate_count)
        parents, tokens = top_indices // vocab_size, top_indices % vocab_size
        ids = write_at(_gather_hypotheses(state.alive_ids, parents), step + 1, tokens)

        length = step + 1
        real = top_log_probs > NEG_INF / 2  # extends a real hypothesis, not an empty slot
        ends = (tokens == eos_id) | (length >= max_lengths)[:, None]

        alive_scores = tf.where(ends | ~real, NEG_INF, top_log_probs)
        alive_log_probs, alive_picks = tf.math.top_k(alive_scores, k=beam_size)
        alive_ids = _gather_hypotheses(ids, alive_picks)
        cache = _reorder_cache(cache, _gather_hypotheses(parents, alive_picks), beam_size)

        new_scores = tf.where(ends & real, top_log_probs / length_penalty(length, alpha), NEG_INF)
        scores = tf.concat([state.finished_scores, new_scores], axis=1)
        finished_scores, finished_picks = tf.math.top_k(scores, k=beam_size)

        def merge_finished(old, new):
            return _gather_hypotheses(tf.concat([old, new], axis=1), finished_picks)

        return BeamSearchState(
            step=length,
            alive_ids=alive_ids,
            alive_log_probs=alive_log_probs,
            finished_ids=merge_finished(state.finished_ids, ids),
            finished_scores=finished_scores,
            finished_log_probs=merge_finished(state.finished_log_probs, top_log_probs),
            finished_lengths=merge_finished(
                state.finished_lengths, tf.fill(tf.shape(tokens), length)
            ),
            cache=cache,
        )

    def can_improve(state: BeamSearchState):
        # Both ends of a monotone penalty bound it over the lengths still reachable.
        best_penalty = tf.maximum(
            length_penalty(state.step + 1, alpha), length_penalty(max_lengths, alpha)
        )
        best_reachable = state.alive_log_probs[:, 0] / best_penalty
        open_sentences = (state.alive_log_probs[:, 0] > NEG_INF / 2) & (
            best_reachable > state.finished_scores[:, -1]
        )
        return (state.step < max_decode_length) & tf.reduce_any(open_sentences)

    ends = _block_ends(position_axes, max_decode_length)
    first_ids = tf.fill([batch_size, beam_size, buffer_length], PAD_ID)
    first_ids = write_at(first_ids, 0, tf.tile(initial_ids[:, None], [1, beam_size]))
    only_first_beam = tf.concat([[0.0], tf.fill([beam_size - 1], NEG_INF)], axis=0)
    initial = BeamSearchState(
        step=tf.constant(0),
        alive_ids=first_ids,
        alive_log_probs=tf.tile(only_first_beam[None, :], [batch_size, 1]),
        finished_ids=first_ids,
        finished_scores=tf.fill([batch_size, beam_size], NEG_INF),
        finished_log_probs=tf.fill([batch_size, beam_size], NEG_INF),
        finished_lengths=tf.zeros([batch_size, beam_size], tf.int32),
        cache=_positions(initial_cache, position_axes, 0, ends[0]),
    )
    final = initial
    for start, end in zip([0, *ends], ends, strict=False):
        if start:
            final = final._replace(
                cache=_grown(final.cache, initial_cache, position_axes, start, end)
            )
        (final,) = tf.while_loop(
            lambda state, end=end: can_improve(state) & (state.step < end),
            lambda state: (step_fn(state),),
            (final,),
            maximum_iterations=end - start,
        )
    return BeamSearchResult(
        ids=final.finished_ids[:, :, 1:],
        scores=final.finished_scores,
        log_probs=final.finished_log_probs,
        lengths=final.finished_lengths,
    )
