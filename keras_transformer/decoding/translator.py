"""Sentences in, translations out: tokenize, decode with the cache (§6.1), detokenize.

`Translator` joins a trained `Transformer` and its subword tokenizer. `translate` takes any list
of sentences: empty lines come back empty, sentences longer than the model's `max_length` are
truncated with a warning naming their line numbers, and the rest are sorted by length into
batches (so little of each batch is padding), decoded, and returned in their input order.

Decoding runs in a `tf.function` traced (with `jit_compile`, compiled) once per padded batch
shape; source lengths are padded up to a multiple of `LENGTH_BUCKET` and a batch's rows up to a
size in `ROW_BUCKETS`, so a long input file, or many calls with a few sentences each, cause a
handful of traces, not one per batch. On a CPU each batch is cut into one slice per core,
decoded side by side (`search.decode_side_by_side`). `load_run` builds a translator from a
training run directory.

Example (needs a trained run, so not run as a doctest)::

    translator = load_run("runs/m30k-ende")
    translator.translate(["A dog runs through the grass."], SearchSettings(beam_size=4, alpha=0.6))
"""

import functools
import logging
from pathlib import Path
from typing import NamedTuple

import numpy as np
import tensorflow as tf
from tqdm.auto import tqdm

from keras_transformer import run_directory
from keras_transformer.config import ConfigError
from keras_transformer.decoding.beam_search import NEG_INF, BeamSearchResult, length_penalty
from keras_transformer.decoding.ensemble import Ensemble
from keras_transformer.decoding.forced import forced_decode, pharaoh_alignment, subword_links
from keras_transformer.decoding.search import (
    best_of,
    decode_side_by_side,
    hypothesis_steps,
    n_best_search,
)
from keras_transformer.decoding.tree_constraint import WellFormedTrees
from keras_transformer.model import Transformer
from keras_transformer.run_directory import CheckpointError, run_tokenizer
from keras_transformer.search_settings import SearchSettings
from pipelines.corpus import CorpusError
from pipelines.marian_tokenizer import MarianTokenizer
from pipelines.tokenizer import EOS_ID, PAD_ID, SubwordTokenizer

logger = logging.getLogger(__name__)

LENGTH_BUCKET = 8  # source lengths are padded to a multiple of this (bounded retracing)
BATCH_SENTENCES = 64

# The batch sizes a batch's rows are padded to: 1, 2, 3, 4, 6, 8, 12, 16, ... (2^k and 3·2^k),
# from 2 on each at most 1.5x the one before, so padding adds under half a batch's rows, and a
# search is traced (with XLA: compiled) about 2·log2(largest batch) times, not once a batch size.
ROW_BUCKETS = sorted({factor * 2**k for factor in (1, 3) for k in range(30)})


class Hypothesis(NamedTuple):
    """One translation of a sentence: its text, its score log P / lp (§6.1's length penalty,
    what beam search ranks by), its log-probability log P (EOS included), and, if asked for,
    its Pharaoh word alignment (`forced.pharaoh_alignment`)."""

    text: str
    score: float
    log_prob: float
    alignment: str | None = None

    def line(self, index) -> str:
        """`INDEX ||| TEXT ||| SCORE ||| LOG_PROB [||| ALIGNMENT]`, Moses's n-best layout."""
        fields = [str(index), self.text, f"{self.score:.6f}", f"{self.log_prob:.6f}"]
        return " ||| ".join(fields + ([self.alignment] if self.alignment is not None else []))


# What an empty line translates to (nothing, certainly), and what it scores.
EMPTY = Hypothesis("", 0.0, 0.0)


class Translator:
    """A `Transformer` and its tokenizer, decoding batches of sentences.

    Args:
        model: a trained `Transformer`, or an `ensemble.Ensemble` of them.
        tokenizer: the tokenizer it was trained with: a `SubwordTokenizer`, or an imported
            model's `MarianTokenizer`.
        jit_compile: compile the search with XLA (one compilation per padded batch shape).
        constraint: optional restriction of the search's outputs (see `search.greedy_decode`),
            such as `tree_constraint.WellFormedTrees`.
        slices: how many slices of a batch to decode side by side; default one per CPU core
            (`decoding.side_by_side_slices`).
        search: the `SearchSettings` its methods decode with where they are given none: §6.1's,
            or a run's own (`load_run`).

    Attributes:
        hypothesis_steps: the hypothesis-steps (one hypothesis through one decoder step) its
            searches have computed so far, a running total: its growth over a call is what
            the call cost (`search.hypothesis_steps`).
    """

    def __init__(
        self,
        model: Transformer,
        tokenizer: SubwordTokenizer | MarianTokenizer,
        jit_compile=False,
        constraint=None,
        slices=None,
        search=SearchSettings(),
    ):
        self.model = model
        self.tokenizer = tokenizer
        self.constraint = constraint
        self.search = search
        self.weights_path = None  # set by `load_run`
        self.max_source_tokens = model.config.max_length - 1  # + EOS
        self.hypothesis_steps = 0
        # XLA needs fixed shapes; without it, sentences leave the batch as they finish.
        search = n_best_search(model, constraint, compact=not jit_compile)
        search = tf.function(search, jit_compile=jit_compile)
        # Not compiled as a whole, so that the slices' searches run at the same time.
        self._decode = tf.function(functools.partial(decode_side_by_side, search, slices=slices))

    def decode_n_best(self, source_ids, search=None) -> BeamSearchResult:
        """Padded source ids `[batch, length]` → the `search.beam_size` best hypotheses of each
        (`search.n_best_hypotheses`); beam size 1 decodes greedily. Only the `search.n_best`
        best are sure to be the full search's: the search stops once they are final. `search`
        defaults to the translator's (so in every method below)."""
        search = search or self.search
        source_ids = tf.convert_to_tensor(source_ids, tf.int32)
        rows = source_ids.shape[0]
        # A Python beam size and extra length fix the shapes; alpha, a tensor, does not retrace.
        result = self._decode(
            pad_rows_to_bucket(source_ids),
            search.beam_size,
            tf.constant(search.alpha, tf.float32),
            search.extra_length,
            search.n_best,
            search.min_length,
            search.penalty,
        )
        self.hypothesis_steps += hypothesis_steps(result, search.beam_size)
        return BeamSearchResult(*(tensor[:rows] for tensor in result))

    def decode_ids(self, source_ids, search=None):
        """Padded source ids `[batch, length]` → best target ids `[batch, out]` and scores,
        searched until the best is final (whatever `search.n_best`).

        Beam size 1 decodes greedily (scores are then plain log-probabilities).
        """
        search = search or self.search
        result = self.decode_n_best(source_ids, search.replace(n_best=1))
        return best_of(result, search.beam_size)

    def encode_sentences(self, sentences, line_numbers=None):
        """Sentences → lists of source ids (EOS appended), truncating over-long ones loudly.

        `line_numbers` (default 1, 2, ...) name the sentences in the truncation warning.
        """
        pieces = self.tokenizer.tokenize(tf.constant(list(sentences), tf.string)).to_list()
        line_numbers = line_numbers or range(1, len(pieces) + 1)
        too_long = [i for i, ids in enumerate(pieces) if len(ids) > self.max_source_tokens]
        if too_long:
            lines = [line_numbers[i] for i in too_long]
            logger.warning(
                "%d sentence(s) longer than %d subwords truncated (lines %s)",
                len(too_long),
                self.max_source_tokens,
                ", ".join(map(str, lines[:20])) + (" ..." if len(lines) > 20 else ""),
            )
        return [ids[: self.max_source_tokens] + [EOS_ID] for ids in pieces]

    def translate(
        self,
        sentences,
        search=None,
        batch_sentences=BATCH_SENTENCES,
        progress=None,
    ) -> list[str]:
        """Translates `sentences` (a list of str) in their order; see the module docstring.
        The best of `translate_n_best`'s hypotheses: the search stops once `search.n_best`
        are final (1, the paper's translation, by default).

        Args:
            progress: show a progress bar; `None` shows one on a terminal for long inputs.
        """
        n_best = self.translate_n_best(
            sentences, search, batch_sentences=batch_sentences, progress=progress
        )
        return [hypotheses[0].text for hypotheses in n_best]

    def translate_n_best(
        self,
        sentences,
        search=None,
        alignments=False,
        batch_sentences=BATCH_SENTENCES,
        progress=None,
    ) -> list[list[Hypothesis]]:
        """The `search.n_best` best `Hypothesis`es of each of `sentences`, best first, as
        `translate` decodes them; fewer where the search found fewer. The search stops once
        those are final. An empty line gets `EMPTY` alone (with an empty alignment).

        `alignments`: add each hypothesis' word alignment (`forced` module docstring).
        """
        search = search or self.search

        def decode(source, _):
            limit = self.model.config.max_length
            result = self.decode_n_best(pad_to_bucket(source, limit=limit), search)
            ids, scores, log_probs = (np.asarray(t)[:, : search.n_best] for t in result[:3])
            found = [
                [(list(i), s, p) for i, s, p in zip(*row, strict=True) if s > NEG_INF / 2]
                for row in zip(ids, scores, log_probs, strict=True)
            ]
            return self._hypotheses(source, found, alignments)

        empty = EMPTY._replace(alignment="") if alignments else EMPTY
        return self._in_batches(sentences, decode, batch_sentences, progress, empty)

    def score(
        self,
        sources,
        targets,
        search=None,
        alignments=False,
        batch_sentences=BATCH_SENTENCES,
        target_name="target",
    ) -> list[Hypothesis]:
        """The model's `Hypothesis` for each given translation `targets[i]` of `sources[i]`
        (forced decoding, `forced.forced_decode`): its log-probability with EOS, its score under
        the length penalty `search.alpha`, and with `alignments` its word alignment. The text is
        the target as given; it is scored in the subword model's segmentation of it.

        `target_name` names the targets (their file) in errors: a target longer than the model's
        `max_length` is one, and so is a count of targets other than of sources.
        """
        if len(sources) != len(targets):
            raise CorpusError(f"{len(sources)} sources but {len(targets)} targets in {target_name}")
        target_ids = self._target_ids(targets, target_name)
        search = search or self.search

        def score_batch(source, batch):
            targets = [target_ids[k] for k in batch]
            forced = forced_decode(self.model, *self._padded_pairs(source, targets))
            scores = forced.log_probs / length_penalty(forced.lengths, search.alpha, search.penalty)
            found = zip(targets, scores.numpy(), forced.log_probs.numpy(), strict=True)
            return self._hypotheses(source, [[item] for item in found], alignments)

        scored = self._in_batches(sources, score_batch, batch_sentences, False, None)
        return [hypotheses[0] for hypotheses in scored]

    def _target_ids(self, targets, name):
        """Each target's subword ids with EOS; a target over the model's length is an error."""
        limit = self.model.config.max_length
        ids = self.tokenizer.tokenize_target(tf.constant(list(targets), tf.string)).to_list()
        for number, row in enumerate(ids, start=1):
            if len(row) + 1 > limit:
                raise CorpusError(
                    f"{name}, line {number}: {len(row) + 1} subwords with EOS, more than the "
                    f"model's max_length {limit}"
                )
        return [row + [EOS_ID] for row in ids]

    def _padded_pairs(self, sources, targets):
        limit = self.model.config.max_length
        return pad_to_bucket(sources, limit=limit), pad_to_bucket(targets, limit=limit)

    def _hypotheses(self, sources, found, alignments):
        """`Hypothesis`es of `found[row]`, a list of (target ids, score, log-probability) of the
        source ids `sources[row]`."""
        flat = [(row, *item) for row, items in enumerate(found) for item in items]
        hypotheses = [[] for _ in found]
        if not flat:
            return hypotheses
        rows, targets, scores, log_probs = zip(*flat, strict=True)
        texts = self.tokenizer.detokenize(pad_to_bucket(targets)).numpy()
        links = self._alignments([sources[row] for row in rows], targets) if alignments else None
        for i, row in enumerate(rows):
            hypotheses[row].append(
                Hypothesis(
                    texts[i].decode("utf-8"),
                    float(scores[i]),
                    float(log_probs[i]),
                    links[i] if alignments else None,
                )
            )
        return hypotheses

    def _alignments(self, sources, targets) -> list[str]:
        """The Pharaoh word alignment of each pair of source and target ids."""
        targets = [ids[: _length_with_eos(ids)] for ids in targets]
        attention = forced_decode(
            self.model, *self._padded_pairs(sources, targets), with_attention=True
        ).attention.numpy()
        words = self.tokenizer.word_indices
        return [
            pharaoh_alignment(
                subword_links(weights[: len(target), : len(source)], source, target),
                words(source),
                words(target),
            )
            for weights, source, target in zip(attention, sources, targets, strict=True)
        ]

    def _in_batches(self, sentences, decode, batch_sentences, progress, empty=EMPTY):
        """`decode(source ids, positions)` on batches of the sentences sorted by length, its
        lists of `Hypothesis`es returned in the sentences' order. Empty sentences get `empty`
        alone, or with `empty=None` are decoded too (their source is EOS alone)."""
        sentences = [s.strip() for s in sentences]
        outputs = [[empty] for _ in sentences]
        real = [i for i, s in enumerate(sentences) if s or empty is None]
        if not real:
            return outputs
        source = self.encode_sentences([sentences[i] for i in real], [i + 1 for i in real])
        order = sorted(range(len(real)), key=lambda k: len(source[k]))
        batches = [order[i : i + batch_sentences] for i in range(0, len(order), batch_sentences)]
        if progress is None:  # tqdm's None: shown on a terminal only
            hide = None if len(batches) > 4 else True
        else:
            hide = not progress
        for batch in tqdm(batches, desc="translating", unit="batch", disable=hide):
            results = decode([source[k] for k in batch], [real[k] for k in batch])
            for k, hypotheses in zip(batch, results, strict=True):
                outputs[real[k]] = hypotheses
        return outputs


def with_target_language(sentences, tokenizer, language: str) -> list[str]:
    """`sentences`, each led by the token of `language` (`>>fra<<` for "fra"), as a multilingual
    Marian model reads its target language; `language` must be one of the tokenizer's
    `target_languages`."""
    languages = getattr(tokenizer, "target_languages", [])
    if language not in languages:
        raise ConfigError(
            f"target_language {language!r} is not one of this model's target languages "
            f"{languages or '(none: it translates into one language)'}"
        )
    return [f">>{language}<< {sentence}" for sentence in sentences]


def n_best_text(sources, n_best, present=lambda source, text: text) -> str:
    """`Hypothesis.line`s of each source's hypotheses (`n_best[i]`, of `sources[i]`), the texts
    as `present(source, text)` shows them (a `Task`'s `present`)."""
    return "".join(
        hypothesis._replace(text=present(source, hypothesis.text)).line(index) + "\n"
        for index, (source, hypotheses) in enumerate(zip(sources, n_best, strict=True))
        for hypothesis in hypotheses
    )


def _length_with_eos(ids) -> int:
    """|Y|: the ids up to the first EOS, it included (all of them, PAD aside, without one)."""
    ids = list(ids)
    return ids.index(EOS_ID) + 1 if EOS_ID in ids else sum(1 for i in ids if i != PAD_ID)


def bucketed_width(longest, bucket=LENGTH_BUCKET, limit=None):
    """`longest` rounded up to a multiple of `bucket`, but not past `limit` (a model's
    `max_length`: its positions end there) unless `longest` is itself wider."""
    width = -(-longest // bucket) * bucket
    return width if limit is None else max(min(width, limit), longest)


def pad_to_bucket(rows, bucket=LENGTH_BUCKET, limit=None):
    """Lists of ids → int32 `[batch, length]`, length `bucketed_width` of the longest row."""
    width = bucketed_width(max(map(len, rows)), bucket, limit)
    padded = np.full((len(rows), width), PAD_ID, np.int32)
    for i, row in enumerate(rows):
        padded[i, : len(row)] = row
    return padded


def pad_rows_to_bucket(source_ids):
    """Source ids `[batch, width]` with copies of the first row appended up to the next size in
    `ROW_BUCKETS`. Copies of a real row, not PAD rows, finish when it does, so the search stops no
    later. TensorFlow ops, so that a serving graph pads as `Translator` does."""
    batch = tf.shape(source_ids)[0]
    buckets = tf.constant(ROW_BUCKETS, tf.int32)
    rows = tf.gather(buckets, tf.searchsorted(buckets, batch[None]))[0]
    return tf.concat([source_ids, tf.repeat(source_ids[:1], rows - batch, axis=0)], axis=0)


def load_run(
    run_dir, weights=None, jit_compile=False, well_formed_trees=False, ensemble=()
) -> Translator:
    """A `Translator` from a training run directory (config.json, its vocabulary, weights).

    `well_formed_trees`: search only well-formed trees of the input's words
    (`tree_constraint.WellFormedTrees`; for a parser trained on the lexicalized target).
    `ensemble`: more members to decode with (`ensemble.Ensemble`), each a run directory (its
    weights as `run_directory.run_weights` picks them) or a weights file in a run directory or in
    its checkpoints/; all must share the run's subword vocabulary.
    Its search is the run's own where run.json records one (`run_directory.run_search`: an
    imported checkpoint's), else §6.1's.
    """
    run_dir = Path(run_dir)
    if well_formed_trees:
        check_parser_run(run_dir)
    model, weights = _load_model(run_dir, weights)
    tokenizer = run_tokenizer(run_dir)
    if ensemble:
        pieces = tokenizer.pieces(range(tokenizer.vocab_size))  # each member's must equal them
        members = [_load_member(tokenizer, pieces, Path(path)) for path in ensemble]
        model = Ensemble([model, *members])
    constraint = WellFormedTrees.from_tokenizer(tokenizer) if well_formed_trees else None
    search = run_directory.run_search(run_dir, SearchSettings())
    translator = Translator(model, tokenizer, jit_compile, constraint, search=search)
    translator.weights_path = weights
    return translator


def check_parser_run(run_dir: Path):
    """Raises unless the run is a parser trained on the lexicalized target, the only one whose
    outputs `WellFormedTrees` can constrain."""
    target = run_directory.read_settings(run_dir).get("target_language")
    if target != "lexicalized":
        raise ConfigError(
            "well_formed_trees needs a parser trained with target_language lexicalized; "
            f"{run_dir} has target {target!r}"
        )


def _load_model(run_dir: Path, weights=None):
    """The run's `Transformer` with `weights` (default: `run_weights`), and the weights' path."""
    model = Transformer(run_directory.read_config(run_dir))
    weights = Path(weights) if weights else run_directory.run_weights(run_dir)
    run_directory.load_weights_checked(model, weights)
    logger.info("loaded %s", weights)
    return model, weights


def _load_member(tokenizer, pieces, path: Path) -> Transformer:
    """An ensemble member from a run directory or a weights file, checked to share the
    vocabulary of `tokenizer` (the first member's, whose `pieces` are its id order)."""
    if not path.exists():
        raise CheckpointError(f"ensemble member {path} does not exist")
    run_dir = run_directory.member_run_directory(path)
    if run_dir is None:
        raise CheckpointError(f"ensemble member {path}: no config.json beside it or above")
    weights = None if path.is_dir() else path
    own = run_tokenizer(run_dir)
    theirs = own.pieces(range(own.vocab_size))
    if theirs != pieces or own.lowercase != tokenizer.lowercase:
        pairs = enumerate(zip(theirs, pieces, strict=False))  # lengths may differ
        differs = next((i for i, (a, b) in pairs if a != b), min(len(theirs), len(pieces)))
        raise ValueError(
            f"ensemble member {run_dir}: its subword vocabulary is not {tokenizer.path}'s "
            f"({own.vocab_size} against {tokenizer.vocab_size} pieces, first difference at id "
            f"{differs}, lowercase {own.lowercase} against {tokenizer.lowercase})"
        )
    return _load_model(run_dir, weights)[0]
