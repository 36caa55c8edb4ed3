"""What a run trains on (§5.1): text files tokenized as they are read, or a corpus that
`keras-transformer prepare` tokenized once into shards (`train --data DIR`).

`training_data(run, config, micro_batch_tokens)` gives a `TrainingData`:

- `tokenizer`: the run's shared vocabulary, held in the run directory (learned from the training
  split, adopted from `--subwords`, or, for prepared data, the prepared one), or the two
  tokenizers of an imported Marian model (`pipelines.MarianTokenizer`) that the run took from
  `--init-from` or from a corpus prepared with them;
- `length_counts`: the training pairs that batches keep, per bucketing length
  (`counts[length]`), for the size of an epoch and XLA's buckets; prepared data gives them from
  its manifest, without reading a shard;
- `text_files`: `{split: (source, target)}` of the splits whose text validation BLEU reads;
- `identity`: `{file name: sha256}` of what identifies the training data (its two files, or the
  prepared corpus's manifest, which holds its shards' checksums), for `run.json`;
- `batches(split, context, repeat, boundaries, pad_batches)`: the split's batches for one input
  pipeline of a `tf.distribute.InputContext` (each worker or pipeline its own share).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from pathlib import Path

import numpy as np

from keras_transformer import run_directory
from keras_transformer.config import ConfigError, TransformerConfig

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class TrainingData:
    tokenizer: object
    length_counts: np.ndarray
    text_files: dict
    batches: Callable
    identity: dict


def training_data(run, config: TransformerConfig, micro_batch_tokens: int) -> TrainingData:
    """The data of `run` (a `trainer.TrainingRun`): prepared shards for `dataset="prepared"`,
    else the text files of its dataset."""
    if run.dataset == "prepared":
        return prepared_shards(run, config, micro_batch_tokens)
    return text_files(run, config, micro_batch_tokens)


def text_files(run, config: TransformerConfig, micro_batch_tokens: int) -> TrainingData:
    """Text files tokenized in the input pipeline, the vocabulary learned from the training
    split (or adopted from `--subwords`) on the first run."""
    from pipelines import (
        SubwordTokenizer,
        corpus_files,
        holds_marian_tokenizer,
        load_or_train_tokenizer,
        make_translation_dataset,
        vocabulary_kind,
    )

    files = corpus_files(run.dataset, run.data_dir, run.source_language, run.target_language)
    if run.subwords:
        run_directory.adopt_subwords(run)
    if run.init_from:
        run_directory.adopt_tokenizer(run.output, run.init_from)
    if holds_marian_tokenizer(run.output):
        tokenizer = marian_tokenizer(run, config)
    else:
        tokenizer = load_or_train_tokenizer(
            run.output / run_directory.SUBWORDS_FILE,
            [*files["train"]],
            config.vocab_size,
            kind=vocabulary_kind(run.dataset),
            lowercase=run.lowercase,
        )
    check_vocabulary_size(tokenizer, config)
    # Only the training pairs are segmented at random; validation scores the segmentation that
    # decoding and export use.
    train_tokenizer = (
        SubwordTokenizer(tokenizer.path, config.subword_dropout)
        if config.subword_dropout
        else tokenizer
    )

    def batches(split, context=None, repeat=False, boundaries=None, pad_batches=False):
        return make_translation_dataset(
            *files[split],
            train_tokenizer if split == "train" else tokenizer,
            _batching(run, config, micro_batch_tokens, split, repeat, boundaries, pad_batches),
            *_pipeline_share(context),
        )

    kept = kept_length_counts(config, files, tokenizer)
    return TrainingData(tokenizer, kept, files, batches, checksums(files["train"]))


def prepared_shards(run, config: TransformerConfig, micro_batch_tokens: int) -> TrainingData:
    """The shards of `keras-transformer prepare` in `run.data_dir`, streamed: no tokenization at
    start, resume or read. The run holds a copy of the prepared vocabulary, checked to be it on
    every resume."""
    from pipelines import SubwordTokenizer
    from pipelines.prepared import (
        MANIFEST_FILE,
        MARIAN_KIND,
        check_vocabulary,
        prepared_dataset,
        prepared_length_counts,
        prepared_text_files,
        prepared_vocabulary,
        read_manifest,
    )

    manifest = read_manifest(run.data_dir)
    check_prepared_settings(run, config, manifest)
    if run.init_from:
        run_directory.adopt_tokenizer(run.output, run.init_from)
    # A resume's copy may predate a new prepare: checked byte for byte either way.
    if manifest["vocabulary"]["kind"] == MARIAN_KIND:
        run_directory.adopt_tokenizer(run.output, run.data_dir)
        tokenizer = marian_tokenizer(run, config)
    else:
        held = run_directory.hold_subwords(run.output, prepared_vocabulary(run.data_dir))
        check_vocabulary(run.data_dir, held)
        tokenizer = SubwordTokenizer(held)
    check_vocabulary_size(tokenizer, config)
    for split, counts in manifest["splits"].items():
        dropped = sum(counts["dropped"].values())
        if dropped:
            logger.info(
                "%s: %d of %d %s pairs dropped by prepare (%s)",
                run.data_dir,
                dropped,
                counts["pairs_read"],
                split,
                counts["dropped"],
            )

    def batches(split, context=None, repeat=False, boundaries=None, pad_batches=False):
        return prepared_dataset(
            run.data_dir,
            split,
            _batching(run, config, micro_batch_tokens, split, repeat, boundaries, pad_batches),
            *_pipeline_share(context),
        )

    kept = prepared_length_counts(run.data_dir, "train", config.max_length)
    identity = checksums([run.data_dir / MANIFEST_FILE])
    return TrainingData(tokenizer, kept, prepared_text_files(run.data_dir), batches, identity)


def marian_tokenizer(run, config: TransformerConfig):
    """The imported Marian model's tokenizers that the run holds (`pipelines.MarianTokenizer`),
    which segment text as the model was trained on: no BPE-dropout nor case folding of ours."""
    from pipelines import MarianTokenizer

    if config.subword_dropout:
        raise ConfigError(
            "subword_dropout samples segmentations of a BPE vocabulary of ours; the run holds an "
            "imported model's SentencePiece models: set subword_dropout=0"
        )
    if run.lowercase:
        raise ConfigError(
            "lowercase with an imported model's tokenizers: their SentencePiece models normalize "
            "text as the model was trained; train with lowercase=False"
        )
    return MarianTokenizer(run.output)


def checksums(paths) -> dict:
    """`{file name: sha256}` of `paths`."""
    from pipelines.prepared import file_sha256

    return {Path(path).name: file_sha256(path) for path in paths}


def check_prepared_settings(run, config: TransformerConfig, manifest: dict):
    """Raises unless the run can train on the prepared corpus as prepared: its languages and
    case folding, without BPE-dropout (its ids are fixed) or `--subwords` (the vocabulary is the
    prepared one, of any kind: the run holds a copy, `run_directory.hold_subwords`)."""
    vocabulary, languages = manifest["vocabulary"], manifest["languages"]
    asked = (run.source_language, run.target_language)
    if asked != (languages["source"], languages["target"]):
        raise ConfigError(
            f"{run.data_dir} was prepared for {languages['source']}->{languages['target']}, "
            f"not {asked[0]}->{asked[1]}: leave source_language and target_language unset"
        )
    if bool(vocabulary["lowercase"]) != run.lowercase:
        raise ConfigError(
            f"{run.data_dir} was prepared with lowercase={bool(vocabulary['lowercase'])}: "
            "train with the same"
        )
    if config.subword_dropout:
        raise ConfigError(
            "subword_dropout segments each pair anew as it is read; prepared data is tokenized "
            "once: train on the text files (their dataset and data_dir) for BPE-dropout"
        )
    if run.subwords:
        raise ConfigError("subwords with a prepared dataset: the run uses the prepared vocabulary")


def check_vocabulary_size(tokenizer, config: TransformerConfig):
    if tokenizer.vocab_size > config.vocab_size:  # its ids past the embedding would be silent
        raise ConfigError(
            f"{tokenizer.path} holds {tokenizer.vocab_size} entries, more than the model's "
            f"vocab_size {config.vocab_size}"
        )


def _batching(run, config, micro_batch_tokens, split, repeat, boundaries, pad_batches):
    """The `BatchingSettings` of a split's batches (`TrainingData.batches`' arguments): the
    training pairs shuffled with the run's seed, every split under the micro-batch's token
    budget and the model's max_length."""
    from pipelines.batching import BatchingSettings

    return BatchingSettings(
        micro_batch_tokens,
        config.max_length,
        boundaries=boundaries,
        pad_batches=pad_batches,
        shuffle=split == "train",
        seed=run.seed,
        repeat=repeat,
    )


def _pipeline_share(context) -> tuple[int, int]:
    """(input pipelines, this one's index) of a `tf.distribute.InputContext`, or one pipeline."""
    return (context.num_input_pipelines, context.input_pipeline_id) if context else (1, 0)


def kept_length_counts(config, files, tokenizer) -> np.ndarray:
    """The training pairs that batches keep, per bucketing length (`counts[length]`); logs the
    over-long pairs that the training and validation batches leave out."""
    from pipelines.batching import length_counts
    from pipelines.translation_dataset import pair_lengths

    lengths = pair_lengths(*files["train"], tokenizer)
    over = lengths > config.max_length
    warn_over_length("training", over, config.max_length, "they are skipped")
    warn_over_length(
        "validation",
        pair_lengths(*files["validation"], tokenizer) > config.max_length,
        config.max_length,
        "the validation loss skips them (BLEU translates them, truncated)",
    )
    return length_counts(lengths[~over])


def warn_over_length(split, over, max_length, consequence):
    """Logs how many pairs of a split are longer than `max_length` (`over`: one bool a pair)."""
    if over.any():
        logger.warning(
            "%d of %d %s pairs are longer than max_length=%d subwords: %s",
            int(over.sum()),
            len(over),
            split,
            max_length,
            consequence,
        )
