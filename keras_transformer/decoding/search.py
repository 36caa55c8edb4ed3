"""Translating with a trained Transformer: greedy and beam search (§6.1) on the decoding cache.

`greedy_decode` and `beam_decode` take source ids and return target ids. Both encode once and then
run the decoder one position at a time: with `cached=True` (the default) through
`Transformer.decode_step` and its preallocated key/value cache, so a step costs one position; with
`cached=False` by re-running the decoder over the whole prefix at every step, which is what the
cache saves and what the tests compare it against.

The output budget follows §6.1: each sentence may generate up to its input length (source ids,
EOS included) + `extra_length` tokens, never more than the model's `max_length`.

These functions run inside a `tf.function` or a serving signature, so they take the search's
values one by one, Python numbers or tensors (a signature's inputs); Python callers hold them
in a `search_settings.SearchSettings` and pass its fields (`Translator` does).

Example:
>>> import numpy as np
>>> from keras_transformer import Transformer, TransformerConfig
>>> from keras_transformer.search_settings import SearchSettings
>>> model = Transformer(TransformerConfig.preset("tiny"))
>>> search = SearchSettings(beam_size=4, extra_length=3)
>>> ids = np.array([[5, 6, 7, 2]])
>>> result = beam_decode(model, ids, search.beam_size, search.alpha, search.extra_length)
>>> tuple(result.ids.shape)  # [batch, beam, input length + extra]
(1, 4, 7)
"""

import os
from typing import NamedTuple

import tensorflow as tf

from keras_transformer.decoding.beam_search import (
    FIXED,
    BeamSearchResult,
    beam_search,
    length_penalty,
    without_early_eos,
    without_tokens,
    write_at,
)
from keras_transformer.decoding.ensemble import decoding_members, mean_distribution
from keras_transformer.layers.decoder_layer import REORDERED_CACHE_AXES
from pipelines.tokenizer import BOS_ID, EOS_ID, PAD_ID

# Never generated: neither can follow in a sentence, and a PAD fed back would be masked by the
# full decoder pass but not by the cache.
NEVER_GENERATED = (PAD_ID, BOS_ID)
# A slice decoded on its own core keeps at least this many rows (see `decode_side_by_side`).
MIN_SLICE_ROWS = 8


class GreedyResult(NamedTuple):
    """ids: int32 `[batch, max_decode_length]` (PAD after EOS); log_probs: float32 `[batch]`;
    lengths: int32 `[batch]`, tokens generated, EOS included; steps: int32 `[batch]`, the
    steps the search ran each sentence for (every sentence, until the last has ended)."""

    ids: tf.Tensor
    log_probs: tf.Tensor
    lengths: tf.Tensor
    steps: tf.Tensor


def greedy_search(
    symbols_to_logits_fn,
    initial_ids,
    initial_cache,
    max_decode_length,
    max_lengths=None,
    banned_ids=(),
    min_length=0,
) -> GreedyResult:
    """Takes the most probable token at every step until EOS or the sentence's maximum length.

    Same contract as `beam_search.beam_search` with one hypothesis per sentence (`min_length`
    too); stops as soon as every sentence has ended.

    Each step reads the logits vocabulary-major, `[vocab, batch]`. XLA then computes the tied
    output projection that produces them as E·hᵀ instead of h·Eᵀ: on a CPU, the matrix kernels
    run a product of a vocabulary's many rows by a slice's few sentence columns faster than the
    other way round (docs/DEFAULTS.md). XLA folds the transpose into the product only when it
    comes straight after it, which is why `banned_ids` and `min_length` apply here, after the
    transpose: a mask in between keeps the product batch-major and copies its output.
    """
    initial_ids = tf.convert_to_tensor(initial_ids, tf.int32)
    batch_size = tf.shape(initial_ids)[0]
    if max_lengths is None:
        max_lengths = tf.fill([batch_size], max_decode_length)
    max_lengths = tf.minimum(tf.cast(max_lengths, tf.int32), max_decode_length)

    def step_fn(step, ids, log_probs, lengths, finished, cache):
        logits, cache = symbols_to_logits_fn(ids[:, step], step, cache)
        scores = tf.transpose(tf.cast(logits, tf.float32))
        # Normalized over the full vocabulary, banned tokens included (`beam_search`).
        log_normalizer = tf.reduce_logsumexp(scores, axis=0)
        scores = without_tokens(scores, banned_ids, vocab_axis=0)
        scores = without_early_eos(scores, step, min_length, vocab_axis=0)
        tokens = tf.argmax(scores, axis=0, output_type=tf.int32)
        tokens = tf.where(finished, PAD_ID, tokens)
        # The log-softmax at the argmax: the maximum less the log-sum-exp.
        token_log_probs = tf.reduce_max(scores, axis=0) - log_normalizer
        log_probs += tf.where(finished, 0.0, token_log_probs)
        lengths += tf.cast(~finished, tf.int32)
        finished |= (tokens == EOS_ID) | (step + 1 >= max_lengths)
        return step + 1, write_at(ids, step + 1, tokens), log_probs, lengths, finished, cache

    ids = tf.fill([batch_size, max_decode_length + 1], PAD_ID)
    steps, ids, log_probs, lengths, _, _ = tf.while_loop(
        lambda step, ids, log_probs, lengths, finished, cache: ~tf.reduce_all(finished),
        step_fn,
        (
            tf.constant(0),
            write_at(ids, 0, initial_ids),
            tf.zeros([batch_size]),
            tf.zeros([batch_size], tf.int32),
            tf.zeros([batch_size], tf.bool),
            initial_cache,
        ),
        maximum_iterations=max_decode_length,
    )
    return GreedyResult(ids[:, 1:], log_probs, lengths, tf.fill([batch_size], steps))


def max_output_lengths(source_ids, extra_length, limit):
    """Per sentence: input length (non-PAD source ids) + `extra_length`, at most `limit`."""
    source_lengths = tf.math.count_nonzero(source_ids != PAD_ID, axis=1, dtype=tf.int32)
    return tf.minimum(source_lengths + extra_length, limit)


def max_decode_length(model, source_ids, extra_length):
    """The static buffer length: padded source length + extra, at most the model's max_length.

    A Python int whenever the source length and `extra_length` are, so that XLA sees fixed
    shapes; a tensor otherwise (a serving signature's inputs). A buffer longer than a
    sentence's limit changes nothing of its search: each sentence stops at its own limit.
    """
    source_length = source_ids.shape[1]
    if source_length is None or not isinstance(extra_length, int):
        return tf.minimum(tf.shape(source_ids)[1] + extra_length, model.config.max_length)
    return min(source_length + extra_length, model.config.max_length)


def cached_step(model, encoder_output, source_mask, max_length):
    """`symbols_to_logits_fn` on `Transformer.decode_step`, and its initial cache.

    The cache holds every layer's keys and values and the source mask; beam search reorders
    only the self-attention keys/values (`_position_axes`): the encoder-decoder ones and the
    mask are the same for all hypotheses of a sentence and computed once.
    """
    cache = (model.init_cache(encoder_output, max_length), source_mask)

    def symbols_to_logits(ids, step, cache):
        layer_caches, source_mask = cache
        logits, layer_caches = model.decode_step(ids, step, layer_caches, source_mask)
        return logits, (layer_caches, source_mask)

    return symbols_to_logits, cache


def uncached_step(model, encoder_output, source_mask, max_length):
    """`symbols_to_logits_fn` that re-runs the decoder over the whole prefix at every step.

    Its cache holds the prefix of target ids itself, which beam search reorders like any
    cache, beside the encoder output and source mask.
    """

    def symbols_to_logits(ids, step, cache):
        prefix, encoder_output, source_mask = cache
        prefix = write_at(prefix, step, ids)
        logits = model.decode(prefix[:, : step + 1], encoder_output, source_mask)
        return logits[:, -1, :], (prefix, encoder_output, source_mask)

    prefix = tf.fill([tf.shape(encoder_output)[0], max_length], PAD_ID)
    return symbols_to_logits, (prefix, encoder_output, source_mask)


def _member_step(model, source_ids, copies, length, cached):
    """One Transformer's `symbols_to_logits` and initial cache, `copies` rows per source."""
    encoder_output, source_mask = model.encode(source_ids, training=False)
    if not isinstance(copies, int) or copies > 1:  # hypothesis k of sentence b: row b*copies+k
        encoder_output = tf.repeat(encoder_output, copies, axis=0)
        source_mask = tf.repeat(source_mask, copies, axis=0)
    make_step = cached_step if cached else uncached_step
    return make_step(model, encoder_output, source_mask, length)


def _position_axes(cache, cached):
    """The position axis of each tensor of one Transformer's cache (`beam_search`'s
    `position_axes`): the self-attention keys' and values', or the uncached prefix's; the
    rest is `FIXED`."""
    if cached:
        layer_caches, _ = cache
        layers = tuple(
            {key: REORDERED_CACHE_AXES.get(key, FIXED) for key in layer} for layer in layer_caches
        )
        return layers, FIXED
    return 1, FIXED, FIXED


def _without_positions(axes):
    """`axes` with no tensor's positions named (one block: the whole cache), the `FIXED`
    tensors kept out of the reordering."""
    return tf.nest.map_structure(lambda axis: FIXED if axis == FIXED else None, axes)


def _search_inputs(model, source_ids, extra_length, copies, cached, constraint, longest_extra):
    source_ids = tf.convert_to_tensor(source_ids, tf.int32)
    length = max_decode_length(model, source_ids, longest_extra or extra_length)
    members = [
        _member_step(member, source_ids, copies, length, cached)
        for member in decoding_members(model)
    ]
    if len(members) == 1:
        step_fn, cache = members[0]
        axes = _position_axes(cache, cached)
    else:
        step_fns, caches = zip(*members, strict=True)
        step_fn, cache = mean_distribution(step_fns), caches
        axes = tuple(_position_axes(member_cache, cached) for member_cache in caches)
    limits = max_output_lengths(source_ids, extra_length, length)
    if constraint is not None:
        rows = tf.repeat(source_ids, copies, axis=0), tf.repeat(limits, copies, axis=0)
        step_fn, cache = constraint(step_fn, cache, *rows)
        axes = constraint.position_axes(axes)
    first_ids = tf.fill([tf.shape(source_ids)[0]], BOS_ID)
    return step_fn, first_ids, cache, length, limits, axes


def greedy_decode(
    model,
    source_ids,
    extra_length,
    cached=True,
    constraint=None,
    longest_extra=None,
    min_length=0,
) -> GreedyResult:
    """Greedy decoding of source ids `[batch, source_length]` (PAD = 0) by `model`, a
    `Transformer` or an `ensemble.Ensemble`.

    `constraint`: optional `(symbols_to_logits, cache, source_ids, max_lengths) ->
    (symbols_to_logits, cache)` that restricts the outputs, such as
    `tree_constraint.WellFormedTrees`, with a method `position_axes(axes)` giving the position
    axes of its cache from those of the cache it wraps (`beam_search.beam_search`).
    `longest_extra`: a Python int ≥ `extra_length` that sizes the buffers in its place, so that
    a tensor `extra_length` (a request's) sets each sentence's limit without fixing a shape:
    one XLA program serves every extra length up to it, with the same results.
    `min_length`: the fewest tokens before EOS (`beam_search.without_early_eos`).
    """
    step_fn, first_ids, cache, length, limits, _ = _search_inputs(
        model, source_ids, extra_length, 1, cached, constraint, longest_extra
    )
    return greedy_search(step_fn, first_ids, cache, length, limits, NEVER_GENERATED, min_length)


def beam_decode(
    model,
    source_ids,
    beam_size,
    alpha,
    extra_length,
    cached=True,
    constraint=None,
    longest_extra=None,
    compact=False,
    exact_hypotheses=None,
    min_length=0,
    penalty="gnmt",
    cache_blocks=True,
) -> BeamSearchResult:
    """Beam search (§6.1) of source ids `[batch, source_length]` (PAD = 0); `model`,
    `constraint`, `longest_extra` and `min_length` as for `greedy_decode`, with one source row
    per hypothesis; `compact` (not under XLA), `exact_hypotheses` and `penalty` as for
    `beam_search.beam_search`.

    `cache_blocks`: grow the decoding cache by blocks of `beam_search.CACHE_BLOCK` positions,
    a loop per block (less to gather and attend over in the early steps); False searches in one
    loop over the whole cache, as a LiteRT model wants: its delegate packs the weights of every
    loop anew, and each loop carries its own copy of the tensors it takes in. Either way the
    encoder-decoder keys and values are never reordered. The results are the same."""
    step_fn, first_ids, cache, length, limits, axes = _search_inputs(
        model, source_ids, extra_length, beam_size, cached, constraint, longest_extra
    )
    return beam_search(
        step_fn,
        first_ids,
        cache,
        beam_size,
        alpha,
        length,
        limits,
        banned_ids=NEVER_GENERATED,
        position_axes=axes if cache_blocks else _without_positions(axes),
        compact=compact,
        exact_hypotheses=exact_hypotheses,
        min_length=min_length,
        penalty=penalty,
    )


def n_best_hypotheses(
    model,
    source_ids,
    beam_size,
    alpha,
    extra_length,
    constraint=None,
    longest_extra=None,
    compact=False,
    exact_hypotheses=None,
    min_length=0,
    penalty="gnmt",
    cache_blocks=True,
) -> BeamSearchResult:
    """The `beam_size` best hypotheses of each source, best first, as a `BeamSearchResult`:
    beam search's finished set, or for `beam_size` 1 greedy decoding's one hypothesis, scored
    as a beam's (log P / lp, §6.1, lp of the form `penalty`). A slot the search left empty
    (fewer distinct hypotheses than beams) scores `NEG_INF`. A tensor `beam_size`, as a
    serving signature takes it, chooses at run time; `longest_extra` and `min_length` as for
    `greedy_decode`; `compact`, `exact_hypotheses`, `penalty` and `cache_blocks` as for
    `beam_decode`."""

    def greedy():
        result = greedy_decode(
            model, source_ids, extra_length, True, constraint, longest_extra, min_length
        )
        scores = result.log_probs / length_penalty(result.lengths, alpha, penalty)
        one = (result.ids, scores, result.log_probs, result.lengths)
        return BeamSearchResult(*(tensor[:, None] for tensor in one), steps=result.steps)

    def beam():
        return beam_decode(
            model,
            source_ids,
            beam_size,
            alpha,
            extra_length,
            True,
            constraint,
            longest_extra,
            compact,
            exact_hypotheses,
            min_length,
            penalty,
            cache_blocks,
        )

    if isinstance(beam_size, int):
        return greedy() if beam_size == 1 else beam()
    return tf.cond(tf.equal(beam_size, 1), greedy, beam)


def n_best_search(model, constraint=None, longest_extra=None, compact=False, cache_blocks=True):
    """`n_best_hypotheses` of `model` under `constraint`, as a function of what varies from
    call to call: `(source_ids, beam_size, alpha, extra_length, exact_hypotheses=None,
    min_length=0, penalty="gnmt")`, the arguments a `tf.function` of it takes (`Translator`'s,
    a serving signature's; `penalty`, a Python string, is traced once per form)."""

    def search_n_best(
        source_ids,
        beam_size,
        alpha,
        extra_length,
        exact_hypotheses=None,
        min_length=0,
        penalty="gnmt",
    ):
        return n_best_hypotheses(
            model,
            source_ids,
            beam_size,
            alpha,
            extra_length,
            constraint,
            longest_extra,
            compact,
            exact_hypotheses,
            min_length,
            penalty,
            cache_blocks,
        )

    return search_n_best


def hypothesis_steps(result, beam_size) -> int:
    """The hypothesis-steps (one hypothesis through one decoder step) a search computed for
    `result`, a `BeamSearchResult` or `GreedyResult` (beam size 1): each sentence's steps ×
    the beam."""
    return int(tf.reduce_sum(tf.cast(result.steps, tf.int64))) * beam_size


def best_of(result: BeamSearchResult, beam_size):
    """The best target ids `[batch, out]` of an `n_best_hypotheses` result and their scores:
    for `beam_size` 1 (greedy decoding) its log-probabilities, otherwise divided by the length
    penalty (§6.1)."""
    if isinstance(beam_size, int):
        scores = result.log_probs if beam_size == 1 else result.scores
    else:
        scores = tf.where(tf.equal(beam_size, 1), result.log_probs, result.scores)
    return result.ids[:, 0], scores[:, 0]


def best_hypotheses(
    model,
    source_ids,
    beam_size,
    alpha,
    extra_length,
    constraint=None,
    min_length=0,
    penalty="gnmt",
    cache_blocks=True,
):
    """`best_of` the `n_best_hypotheses`, searched until the best is final (`cache_blocks` as
    for `beam_decode`)."""
    search = n_best_search(model, constraint, cache_blocks=cache_blocks)
    result = search(source_ids, beam_size, alpha, extra_length, 1, min_length, penalty)
    return best_of(result, beam_size)


def side_by_side_slices(batch_size, requested=None) -> int:
    """How many slices `decode_side_by_side` cuts a batch of `batch_size` into: `requested`, at
    most one per row; by default one per CPU core the process may use, each of at least
    `MIN_SLICE_ROWS` rows; 1 with a GPU (one large batch suits it best) or an unknown batch
    size (a serving signature's input)."""
    if batch_size is None:
        return 1
    if requested:
        return min(requested, batch_size)
    if tf.config.list_logical_devices("GPU"):
        return 1
    cores = tf.config.threading.get_inter_op_parallelism_threads() or len(os.sched_getaffinity(0))
    return max(1, min(cores, batch_size // MIN_SLICE_ROWS))


def decode_side_by_side(search, source_ids, *args, slices=None):
    """`search(source_ids, *args)` on slices of the batch decoded at the same time, concatenated.

    `search` is a `tf.function` (XLA-compiled for speed) mapping source ids `[batch, length]` to
    a nest of tensors with the batch first, such as `n_best_hypotheses`; `decode_side_by_side`
    must run inside a `tf.function` that is not XLA-compiled. Each slice is then a separate
    call with no dependence on the others, which TensorFlow's executor runs on its inter-op
    threads at once; a single XLA program would run them one after another. Sentences decode
    independently, so the result equals `search(source_ids, *args)`.

    Why: a decoding step multiplies matrices of only `batch` rows, which the matrix-product
    kernels split badly across threads; slices decoded side by side, one per core, finish
    sooner than one batch, greedy or beam (docs/DEFAULTS.md).

    `slices`: see `side_by_side_slices`; the first `batch % slices` slices get one row more
    than the others.
    """
    batch_size = source_ids.shape[0]
    slices = side_by_side_slices(batch_size, slices)
    if slices == 1:
        return search(source_ids, *args)
    rows, extra = divmod(batch_size, slices)
    sizes = [rows + (i < extra) for i in range(slices)]
    outputs = [search(part, *args) for part in tf.split(source_ids, sizes)]
    return tf.nest.map_structure(lambda *parts: tf.concat(parts, axis=0), *outputs)
