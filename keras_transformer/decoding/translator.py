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
    translator.translate(["A dog runs through the grass."], beam_size=4, alpha=0.6)
"""

import functools
import logging
from pathlib import Path

import numpy as np
import tensorflow as tf
from tqdm.auto import tqdm

from keras_transformer import run_directory
from keras_transformer.config import ConfigError
from keras_transformer.decoding.ensemble import Ensemble
from keras_transformer.decoding.search import (
    ALPHA,
    BEAM_SIZE,
    EXTRA_LENGTH,
    best_hypotheses,
    decode_side_by_side,
)
from keras_transformer.decoding.tree_constraint import WellFormedTrees
from keras_transformer.model import Transformer
from keras_transformer.run_directory import SUBWORDS_FILE, CheckpointError
from pipelines.tokenizer import EOS_ID, PAD_ID, SubwordTokenizer

logger = logging.getLogger(__name__)

LENGTH_BUCKET = 8  # source lengths are padded to a multiple of this (bounded retracing)
BATCH_SENTENCES = 64

# The batch sizes a batch's rows are padded to: 1, 2, 3, 4, 6, 8, 12, 16, ... (2^k and 3·2^k),
# from 2 on each at most 1.5x the one before, so padding adds under half a batch's rows, and a
# search is traced (with XLA: compiled) about 2·log2(largest batch) times, not once a batch size.
ROW_BUCKETS = sorted({factor * 2**k for factor in (1, 3) for k in range(30)})


class Translator:
    """A `Transformer` and its `SubwordTokenizer`, decoding batches of sentences.

    Args:
        model: a trained `Transformer`, or an `ensemble.Ensemble` of them.
        tokenizer: the `SubwordTokenizer` it was trained with.
        jit_compile: compile the search with XLA (one compilation per padded batch shape).
        constraint: optional restriction of the search's outputs (see `search.greedy_decode`),
            such as `tree_constraint.WellFormedTrees`.
        slices: how many slices of a batch to decode side by side; default one per CPU core
            (`decoding.side_by_side_slices`).
    """

    def __init__(
        self,
        model: Transformer,
        tokenizer: SubwordTokenizer,
        jit_compile=False,
        constraint=None,
        slices=None,
    ):
        self.model = model
        self.tokenizer = tokenizer
        self.constraint = constraint
        self.weights_path = None  # set by `load_run`
        self.max_source_tokens = model.config.max_length - 1  # + EOS
        search = tf.function(self._best_ids, jit_compile=jit_compile)
        # Not compiled as a whole, so that the slices' searches run at the same time.
        self._decode = tf.function(functools.partial(decode_side_by_side, search, slices=slices))

    def _best_ids(self, source_ids, beam_size, alpha, extra_length):
        return best_hypotheses(
            self.model, source_ids, beam_size, alpha, extra_length, self.constraint
        )

    def decode_ids(self, source_ids, beam_size=BEAM_SIZE, alpha=ALPHA, extra_length=EXTRA_LENGTH):
        """Padded source ids `[batch, length]` → best target ids `[batch, out]` and scores.

        `beam_size=1` decodes greedily (scores are then plain log-probabilities).
        """
        source_ids = tf.convert_to_tensor(source_ids, tf.int32)
        rows = source_ids.shape[0]
        # A Python beam size and extra length fix the shapes; alpha, a tensor, does not retrace.
        target_ids, scores = self._decode(
            pad_rows_to_bucket(source_ids), beam_size, tf.constant(alpha, tf.float32), extra_length
        )
        return target_ids[:rows], scores[:rows]

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
        beam_size=BEAM_SIZE,
        alpha=ALPHA,
        extra_length=EXTRA_LENGTH,
        batch_sentences=BATCH_SENTENCES,
        progress=None,
    ) -> list[str]:
        """Translates `sentences` (a list of str) in their order; see the module docstring.

        Args:
            progress: show a progress bar; `None` shows one on a terminal for long inputs.
        """
        sentences = [s.strip() for s in sentences]
        outputs = [""] * len(sentences)
        real = [i for i, s in enumerate(sentences) if s]
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
            ids, _ = self.decode_ids(
                pad_to_bucket([source[k] for k in batch], limit=self.model.config.max_length),
                beam_size,
                alpha,
                extra_length,
            )
            texts = self.tokenizer.detokenize(ids).numpy()
            for k, text in zip(batch, texts, strict=True):
                outputs[real[k]] = text.decode("utf-8")
        return outputs


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
    """A `Translator` from a training run directory (config.json, subwords.model, weights).

    `well_formed_trees`: search only well-formed trees of the input's words
    (`tree_constraint.WellFormedTrees`; for a parser trained on the lexicalized target).
    `ensemble`: more members to decode with (`ensemble.Ensemble`), each a run directory (its
    weights as `run_directory.run_weights` picks them) or a weights file in a run directory or in
    its checkpoints/; all must share the run's subword vocabulary.
    """
    run_dir = Path(run_dir)
    if well_formed_trees:
        check_parser_run(run_dir)
    model, weights = _load_model(run_dir, weights)
    tokenizer = SubwordTokenizer(run_dir / SUBWORDS_FILE)
    if ensemble:
        pieces = tokenizer.pieces(range(tokenizer.vocab_size))  # each member's must equal them
        members = [_load_member(tokenizer, pieces, Path(path)) for path in ensemble]
        model = Ensemble([model, *members])
    constraint = WellFormedTrees.from_tokenizer(tokenizer) if well_formed_trees else None
    translator = Translator(model, tokenizer, jit_compile, constraint)
    translator.weights_path = weights
    return translator


def check_parser_run(run_dir: Path):
    """Raises unless the run is a parser trained on the lexicalized target, the only one whose
    outputs `WellFormedTrees` can constrain."""
    target = run_directory.read_settings(run_dir).get("target_language")
    if target != "lexicalized":
        raise ConfigError(
            f"--well-formed needs a parser trained with --tgt lexicalized; {run_dir} has "
            f"target {target!r}"
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
    own = SubwordTokenizer(run_dir / SUBWORDS_FILE)
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
