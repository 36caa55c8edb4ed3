"""Beam search with a length penalty and early termination, §6.1.

"We used beam search with a beam size of 4 and length penalty α = 0.6 ... We set the maximum output
length during inference to input length + 50, but terminate early when possible."

The length penalty is GNMT's (Wu et al., 2016): a hypothesis Y of |Y| tokens (its EOS included)
with log-probability log P(Y) scores

    score(Y) = log P(Y) / lp(Y),    lp(Y) = ((5 + |Y|) / 6)^α,

or, with `penalty="length"`, lp(Y) = |Y|^α, the penalty Marian, fairseq, transformers and
CTranslate2 divide by (`search_settings.PENALTIES`): what an imported OPUS-MT model's α was
chosen for.

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
as the model's matrix products. A cache tensor marked `FIXED` there (the encoder's keys and
values) is the same for every hypothesis of a sentence: re-ranking leaves it as it is.

With `compact=True` (not under XLA, which needs fixed shapes) a sentence leaves the batch as
soon as it can no longer improve: its hypotheses are written to the result, and its rows of
every loop tensor and cache tensor, `FIXED` ones included, are dropped, so the steps after it
compute only the sentences still open; the search is then one loop, whose cache grows by a
block at each block's first step. Without it a batch runs every sentence until its last one is
done, which on real batches is two to three times the hypothesis-steps needed
(docs/DEFAULTS.md). The results are the same either way.

A token's log-probability is the log-softmax of its logit over the whole vocabulary; the tokens
a step may not generate (`banned_ids`, EOS before `min_length`) are masked after it, as
transformers, Marian and fairseq mask theirs: the mass they held is not spread over the others,
so a score is the model's log P(Y). (Masking them before normalizing, as CTranslate2 does, raises
every score by that mass.)

Alive and finished hypotheses are kept apart (as in tensor2tensor): each step extends the `beam`
alive ones by every token, keeps the `2 × beam` best candidates (each alive one's best `2 × beam`
tokens hold them: only those are ranked, not `beam × vocab`), sends those ending in EOS (or at their
sentence's maximum length) to the finished set, ranked by penalized score, and keeps the best `beam`
others alive. The search ends early once no alive hypothesis of any sentence can still beat the
worst of its sentence's `beam` finished ones: log-probabilities only fall as a hypothesis grows, so
the best an alive one can reach is its log-probability over the largest penalty still possible.
Stopping then loses nothing that running to the maximum length would have found; the search itself
is still a beam search, which never scores an EOS ending outside a step's `2 × beam` candidates.
When only the best `exact_hypotheses` of each sentence are wanted (1 for a translation), a sentence
stops as soon as no alive hypothesis can beat the `exact_hypotheses`-th finished one: those come out
as the full search gives them, sooner.

Example:
>>> import tensorflow as tf
>>> def uniform(ids, step, cache):  # every one of 5 tokens equally likely, at every step
...     return tf.zeros([tf.shape(ids)[0], 5]), cache
>>> result = beam_search(uniform, tf.ones([2], tf.int32), (), beam_size=3, max_decode_length=4)
>>> result.ids.shape, result.scores.shape
(TensorShape([2, 3, 4]), TensorShape([2, 3]))
"""

import functools
from typing import Any, NamedTuple

import tensorflow as tf

from pipelines.tokenizer import EOS_ID, PAD_ID

# Large and finite: -inf would turn "-inf - -inf" into NaN in the score arithmetic.
NEG_INF = -1e9
# The cache grows along its positions by blocks of this many: a step reorders, and attends
# over, the blocks written so far, not the whole preallocated cache.
CACHE_BLOCK = 16
# In `position_axes`: a cache tensor the same for every hypothesis of a sentence, never
# re-ranked and never grown (dropped only with its sentence, under `compact`).
FIXED = "fixed"


def without_tokens(scores, token_ids, vocab_axis=-1, when=True):
    """`scores` `[rows, vocab]` (or `[vocab, rows]` with `vocab_axis=0`) with the entries of
    `token_ids` set to `NEG_INF` (if `when`, a boolean scalar): never chosen. The searches ban
    tokens after the log-softmax over the full vocabulary (`BANS_AFTER_NORMALIZING`)."""
    if not token_ids:
        return scores
    vocabulary = tf.range(tf.shape(scores)[vocab_axis])
    banned = tf.reduce_any(vocabulary[:, None] == tf.constant(token_ids, tf.int32), axis=1)
    banned &= when
    return tf.where(banned[:, None] if vocab_axis == 0 else banned, NEG_INF, scores)


def without_early_eos(scores, step, min_length, eos_id=EOS_ID, vocab_axis=-1):
    """`scores` of the token after `step` generated ones, with EOS's set to `NEG_INF` while
    `step` < `min_length`: no hypothesis ends before `min_length` tokens (EOS not counted)."""
    if isinstance(min_length, int) and min_length == 0:
        return scores
    return without_tokens(scores, (eos_id,), vocab_axis, when=step < min_length)


def token_bias(vocab_size, token_ids):
    """float32 `[vocab]`: `NEG_INF` at `token_ids`, 0 elsewhere. Added to log-probabilities,
    it keeps those tokens from being chosen."""
    if not token_ids:
        return tf.zeros([vocab_size])
    ids = sorted(set(token_ids))
    return tf.scatter_nd(tf.constant(ids)[:, None], tf.fill([len(ids)], NEG_INF), [vocab_size])


def length_penalty(length, alpha, penalty="gnmt"):
    """lp(Y) for a hypothesis of `length` tokens: `penalty` "gnmt" ((5 + |Y|) / 6)^α (§6.1 uses
    α = 0.6), or "length" |Y|^α."""
    length = tf.cast(length, tf.float32)
    base = (5.0 + length) / 6.0 if penalty == "gnmt" else length
    return tf.pow(base, tf.cast(alpha, tf.float32))


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
    steps: int32 `[batch]`, the steps the search ran the sentence for: each computed its
        `beam` hypotheses, so the sentence cost `steps × beam` hypothesis-steps.
    """

    ids: tf.Tensor
    scores: tf.Tensor
    log_probs: tf.Tensor
    lengths: tf.Tensor
    steps: tf.Tensor


class Compacted(NamedTuple):
    """What `compact` carries through the loop beside the state: the limits of the sentences
    still in it and their rows in the batch, and the results of those already dropped."""

    max_lengths: tf.Tensor  # int32 [open sentences]
    rows: tf.Tensor  # int32 [open sentences]
    results: BeamSearchResult  # of every sentence in the batch


def write_at(ids, position, tokens):
    """`ids[..., position] = tokens` with fixed shapes (a select, not a scatter)."""
    at_position = tf.range(tf.shape(ids)[-1]) == position
    return tf.where(at_position, tokens[..., None], ids)


def _gather_hypotheses(values, indices):
    """`values[b, indices[b, k]]` for tensors `[batch, n, ...]` and indices `[batch, k]`."""
    return tf.gather(values, indices, batch_dims=1)


def _rows_of(sentences, beam_size):
    """The cache rows (`b * beam + k`) of every hypothesis `k` of sentences `b` (`[n]`)."""
    return tf.reshape(sentences[:, None] * beam_size + tf.range(beam_size), [-1])


def _reorder_cache(cache, parents, beam_size, position_axes):
    """Gathers the cache rows of each kept hypothesis' parent (`parents`: `[batch, beam]`);
    `FIXED` tensors stay as they are."""
    batch_offsets = tf.range(tf.shape(parents)[0])[:, None] * beam_size
    rows = tf.reshape(parents + batch_offsets, [-1])
    return _map_cache(
        lambda t, axis: t if axis == FIXED else tf.gather(t, rows), cache, position_axes
    )


def _map_cache(fn, cache, position_axes):
    """`fn(tensor, its position axis)` over the cache (axis None for all without axes)."""
    if position_axes is None:
        return tf.nest.map_structure(lambda t: fn(t, None), cache)
    return tf.nest.map_structure(fn, cache, position_axes)


def _block_ends(position_axes, max_decode_length):
    """The steps at which the cache grows by a block: `CACHE_BLOCK`, 2 `CACHE_BLOCK`, ... up to
    `max_decode_length`; one block of all positions without position axes or a static length."""
    if not _any_positions(position_axes) or not isinstance(max_decode_length, int):
        return [max_decode_length]
    return [
        min(end, max_decode_length)
        for end in range(CACHE_BLOCK, max_decode_length + CACHE_BLOCK, CACHE_BLOCK)
    ]


def _has_positions(axis):
    return isinstance(axis, int)


def _any_positions(position_axes) -> bool:
    return position_axes is not None and any(map(_has_positions, tf.nest.flatten(position_axes)))


def _positions(cache, position_axes, start, end):
    """Each tensor of `cache` cut to positions `start` to `end` along its position axis."""
    return _map_cache(
        lambda t, axis: (
            t[(slice(None),) * axis + (slice(start, end),)] if _has_positions(axis) else t
        ),
        cache,
        position_axes,
    )


def _grown(cache, initial_cache, position_axes, start, end, rows=None):
    """`cache` with the initial (unwritten) positions `start` to `end` appended: those of the
    cache rows `rows` of `initial_cache`, or of all."""
    added = _positions(initial_cache, position_axes, start, end)
    if rows is not None:
        added = tf.nest.map_structure(lambda t: tf.gather(t, rows), added)
    return tf.nest.map_structure(
        lambda t, more, axis: tf.concat([t, more], axis) if _has_positions(axis) else t,
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
    compact=False,
    exact_hypotheses=None,
    min_length=0,
    penalty="gnmt",
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
            the positions `symbols_to_logits_fn` writes at `step`, None, or `FIXED`. The
            cache then grows by blocks of `CACHE_BLOCK` positions (without `compact`, a loop
            per block, each of fixed shapes), and `symbols_to_logits_fn` must take it of any
            length from `step + 1` on; the results are the same.
        compact: drop each sentence from the batch once it is done (shapes then change from
            step to step, so not under XLA); the results are the same.
        exact_hypotheses: how many of each sentence's best hypotheses must be those of the
            full search (default all `beam_size`); those after them may differ.
        min_length: the fewest tokens before EOS (`without_early_eos`); a sentence whose
            limit is at most that many ends at its limit, every hypothesis that long.
        penalty: the length penalty's form, "gnmt" or "length" (`length_penalty`).

    Returns:
        A `BeamSearchResult`.
    """
    initial_ids = tf.convert_to_tensor(initial_ids, tf.int32)
    batch_size = tf.shape(initial_ids)[0]
    if max_lengths is None:
        max_lengths = tf.fill([batch_size], max_decode_length)
    max_lengths = tf.minimum(tf.cast(max_lengths, tf.int32), max_decode_length)
    state = _initial_state(initial_ids, beam_size, max_decode_length)

    def disallowed(vocab_size, step):  # never the banned tokens; no EOS before `min_length`
        bias = token_bias(vocab_size, banned_ids)
        if isinstance(min_length, int) and min_length == 0:
            return bias
        return bias + tf.where(step < min_length, token_bias(vocab_size, (eos_id,)), 0.0)

    penalize = functools.partial(length_penalty, alpha=alpha, penalty=penalty)
    expand = functools.partial(
        _expand, symbols_to_logits_fn, beam_size, penalize, eos_id, disallowed, position_axes
    )
    is_open = functools.partial(
        _open_sentences, penalize=penalize, exact=exact_hypotheses or beam_size
    )
    if compact:
        return _compacted_search(
            expand,
            is_open,
            state,
            initial_cache,
            position_axes,
            beam_size,
            max_decode_length,
            max_lengths,
        )
    return _search_by_blocks(
        expand, is_open, state, initial_cache, position_axes, max_decode_length, max_lengths
    )


def _search_by_blocks(
    expand, is_open, state, initial_cache, position_axes, max_decode_length, max_lengths
):
    """The search with fixed shapes, as XLA needs: a loop per cache block, every sentence in
    every step until the last is done."""
    ends = _block_ends(position_axes, max_decode_length)
    state = state._replace(cache=_positions(initial_cache, position_axes, 0, ends[0]))
    for start, end in zip([0, *ends], ends, strict=False):
        if start:
            state = state._replace(
                cache=_grown(state.cache, initial_cache, position_axes, start, end)
            )
        # The limits stay outside the loop (XLA fails on a constant carried through it).
        (state,) = tf.while_loop(
            lambda state, end=end: (state.step < end) & tf.reduce_any(is_open(state, max_lengths)),
            lambda state: (expand(state, max_lengths),),
            (state,),
            maximum_iterations=end - start,
        )
    return _results_of(state)


def _compacted_search(
    expand, is_open, state, initial_cache, position_axes, beam_size, max_decode_length, max_lengths
):
    """The search in one loop whose shapes change (not under XLA): each sentence leaves the
    batch once done, and the cache grows by a block at the first step of each."""
    first_end = (
        tf.minimum(CACHE_BLOCK, max_decode_length)
        if _any_positions(position_axes)
        else max_decode_length
    )
    state = state._replace(cache=_positions(initial_cache, position_axes, 0, first_end))
    carried = Compacted(max_lengths, tf.range(tf.shape(max_lengths)[0]), _results_of(state))

    def grown(state, carried):
        start = state.step
        end = tf.minimum(start + CACHE_BLOCK, max_decode_length)
        rows = _rows_of(carried.rows, beam_size)
        cache = _grown(state.cache, initial_cache, position_axes, start, end, rows)
        return state._replace(cache=cache)

    def body(state, carried):
        if _any_positions(position_axes):
            at_block_start = (state.step > 0) & (state.step % CACHE_BLOCK == 0)
            state = tf.cond(at_block_start, lambda: grown(state, carried), lambda: state)
        return _step_and_drop_done(expand, is_open, beam_size, state, carried)

    state, carried = tf.while_loop(
        lambda state, carried: (
            (state.step < max_decode_length) & tf.reduce_any(is_open(state, carried.max_lengths))
        ),
        body,
        (state, carried),
        shape_invariants=_any_batch(state, carried, position_axes),
        maximum_iterations=max_decode_length,
    )
    return _published(state, carried)


def _initial_state(initial_ids, beam_size, max_decode_length):
    """Every sentence's first alive hypothesis: BOS, log-probability 0; nothing finished."""
    batch_size = tf.shape(initial_ids)[0]
    first_ids = tf.fill([batch_size, beam_size, max_decode_length + 1], PAD_ID)
    first_ids = write_at(first_ids, 0, tf.tile(initial_ids[:, None], [1, beam_size]))
    only_first_beam = tf.concat([[0.0], tf.fill([beam_size - 1], NEG_INF)], axis=0)
    return BeamSearchState(
        step=tf.constant(0),
        alive_ids=first_ids,
        alive_log_probs=tf.tile(only_first_beam[None, :], [batch_size, 1]),
        finished_ids=first_ids,
        finished_scores=tf.fill([batch_size, beam_size], NEG_INF),
        finished_log_probs=tf.fill([batch_size, beam_size], NEG_INF),
        finished_lengths=tf.zeros([batch_size, beam_size], tf.int32),
        cache=(),
    )


def _expand(
    symbols_to_logits_fn, beam_size, penalize, eos_id, disallowed, position_axes, state, max_lengths
):
    """One step: extends the alive hypotheses by every token, keeps the `2 × beam` best, sends
    those that end to the finished set and keeps the best `beam` others alive."""
    step = state.step
    logits, cache = symbols_to_logits_fn(
        tf.reshape(state.alive_ids[:, :, step], [-1]), step, state.cache
    )
    vocab_size = logits.shape[-1] or tf.shape(logits)[-1]
    # The log-softmax over the full vocabulary, then the bans in one pass: a `[vocab]` bias,
    # all but min_length's constant.
    log_probs = tf.nn.log_softmax(tf.cast(logits, tf.float32)) + disallowed(vocab_size, step)
    top_log_probs, parents, tokens = _best_candidates(
        log_probs, state.alive_log_probs, beam_size, vocab_size
    )
    ids = write_at(_gather_hypotheses(state.alive_ids, parents), step + 1, tokens)

    length = step + 1
    real = top_log_probs > NEG_INF / 2  # extends a real hypothesis, not an empty slot
    ends = (tokens == eos_id) | (length >= max_lengths)[:, None]

    alive_scores = tf.where(ends | ~real, NEG_INF, top_log_probs)
    alive_log_probs, alive_picks = tf.math.top_k(alive_scores, k=beam_size)
    alive_ids = _gather_hypotheses(ids, alive_picks)
    cache = _reorder_cache(
        cache, _gather_hypotheses(parents, alive_picks), beam_size, position_axes
    )

    new_scores = tf.where(ends & real, top_log_probs / penalize(length), NEG_INF)
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
        finished_lengths=merge_finished(state.finished_lengths, tf.fill(tf.shape(tokens), length)),
        cache=cache,
    )


def _best_candidates(log_probs, alive_log_probs, beam_size, vocab_size):
    """The `2 × beam` most probable extensions of each sentence's alive hypotheses.

    A candidate's log-probability is its parent's (`alive_log_probs`, `[batch, beam]`) plus its
    token's in the parent's row of `log_probs` (`[batch * beam, vocab]`, banned tokens at
    `NEG_INF`). The
    parent's is the same for every token of a row, so a sentence's best candidates are among
    each of its rows' `2 × beam` best tokens (ties go to the lower token, as over the whole
    sentence): the parents' log-probabilities are added to those alone, and the `2 × beam` best
    of a sentence come from its `beam × 2 × beam` of them, not from `beam × vocab`.

    Returns:
        log-probabilities float32 `[batch, 2 × beam]`, best first; the parent of each, int32
        `[batch, 2 × beam]` (an index into the beam); and its token, int32 `[batch, 2 × beam]`.
    """
    batch_size = tf.shape(alive_log_probs)[0]
    # min(2 × beam, beam × vocab) candidates in all, as over whole rows; static for XLA.
    smaller = min if isinstance(vocab_size, int) and isinstance(beam_size, int) else tf.minimum
    row_count = smaller(2 * beam_size, vocab_size)
    row_log_probs, row_tokens = tf.math.top_k(log_probs, k=row_count)
    candidates = alive_log_probs[:, :, None] + tf.reshape(
        row_log_probs, [batch_size, beam_size, row_count]
    )
    top_log_probs, picks = tf.math.top_k(
        tf.reshape(candidates, [batch_size, beam_size * row_count]),
        k=smaller(2 * beam_size, beam_size * row_count),
    )
    tokens = _gather_hypotheses(tf.reshape(row_tokens, [batch_size, -1]), picks)
    return top_log_probs, picks // row_count, tokens


def _open_sentences(state: BeamSearchState, max_lengths, penalize, exact):
    """Whether each sentence's best alive hypothesis can still beat its `exact`-th best
    finished one.

    Both ends of a monotone penalty bound it over the lengths still reachable; a sentence once
    closed stays closed (log-probabilities only fall, finished scores only rise).
    """
    best_penalty = tf.maximum(penalize(state.step + 1), penalize(max_lengths))
    best_reachable = state.alive_log_probs[:, 0] / best_penalty
    return (state.alive_log_probs[:, 0] > NEG_INF / 2) & (
        best_reachable > state.finished_scores[:, exact - 1]
    )


def _step_and_drop_done(expand, is_open, beam_size, state, carried: Compacted):
    """`expand`, then the sentences that can no longer improve written to the results and
    dropped from the state."""
    state = expand(state, carried.max_lengths)
    still_open = is_open(state, carried.max_lengths)

    def drop_done():
        kept = tf.cast(tf.reshape(tf.where(still_open), [-1]), tf.int32)
        sentences = {
            field: tf.gather(getattr(state, field), kept)
            for field in BeamSearchState._fields
            if field not in ("step", "cache")
        }
        kept_rows = _rows_of(kept, beam_size)
        cache = tf.nest.map_structure(lambda t: tf.gather(t, kept_rows), state.cache)
        return state._replace(**sentences, cache=cache), Compacted(
            tf.gather(carried.max_lengths, kept),
            tf.gather(carried.rows, kept),
            _published(state, carried),
        )

    return tf.cond(tf.reduce_all(still_open), lambda: (state, carried), drop_done)


def _results_of(state: BeamSearchState) -> BeamSearchResult:
    return BeamSearchResult(
        ids=state.finished_ids[:, :, 1:],
        scores=state.finished_scores,
        log_probs=state.finished_log_probs,
        lengths=state.finished_lengths,
        steps=tf.fill(tf.shape(state.finished_scores)[:1], state.step),
    )


def _published(state: BeamSearchState, carried: Compacted) -> BeamSearchResult:
    """The results with the rows of the state's sentences set to their finished hypotheses."""
    rows = carried.rows[:, None]
    return BeamSearchResult(
        *(
            tf.tensor_scatter_nd_update(all_rows, rows, these_rows)
            for all_rows, these_rows in zip(carried.results, _results_of(state), strict=True)
        )
    )


def _any_batch(state: BeamSearchState, carried: Compacted, position_axes):
    """The compacted loop's shape invariants: any number of sentences (and rows), and any
    number of cache positions."""

    def any_rows(t, axis=None):
        if not t.shape.rank:
            return t.shape
        dims = [None, *t.shape[1:]]
        if _has_positions(axis):
            dims[axis] = None
        return tf.TensorShape(dims)

    cache = _map_cache(any_rows, state.cache, position_axes)
    sentences = tf.nest.map_structure(any_rows, state._replace(cache=()))
    return sentences._replace(cache=cache), Compacted(
        any_rows(carried.max_lengths),
        any_rows(carried.rows),
        tf.nest.map_structure(lambda t: t.shape, carried.results),
    )
