"""A prepared corpus (`keras-transformer prepare`, `pipelines.prepare`), read back as batches.

A prepared directory holds:

    manifest.json                         written last: what is there, and from what
    subwords.model | subwords.vocab.txt   the shared subword vocabulary (`SubwordTokenizer`)
    or source.spm, target.spm, vocabulary.txt
                                          an imported Marian model's tokenizers
                                          (`MarianTokenizer`; `prepare --tokenizer-from RUN`)
    {split}-{i:05d}-of-{n:05d}.tfrecord   the pairs of a split, as token ids
    {split}.source.txt, {split}.target.txt  the text of each split but train (for BLEU)

Each TFRecord record is a `tf.train.Example` with two int64 lists:

    source   the source sentence's subword ids, then EOS (2)
    target   the target sentence's subword ids, then EOS (2)

so that `add_boundary_tokens(source[:-1], target[:-1])` gives the model's element
`((source, [BOS] + target[:-1]), target)`, as `make_translation_dataset` does from text. A pair's
bucketing length (`pipelines.batching.pair_lengths_of_chunk`) is `max(len(source), len(target))`.
Pair i of a split (in input order, dropped pairs counted) is in shard `i mod n`, so every shard
samples the whole corpus. Several input pipelines (workers) share a split by pairs, not by
files: each reads every shard file and parses only every k-th pair, so that their shares are
equal to a pair (before a `max_length` below the prepared one drops some), and an epoch of the
same number of steps on each reads every pair once.

`manifest.json` (format version 1):

    format, format_version        "keras-transformer-prepared", 1
    corpus                        kind ("text", "tsv", "tfds"), its inputs (path, bytes,
                                  sha256 of each file), for tfds name, config, version, and
                                  dataset: the trainer's corpus it is (`prepare --dataset`)
    languages                     {"source": label, "target": label}
    options                       vocabulary (bpe, unigram, word, wordpiece), vocab_size,
                                  max_length, shard_pairs, sample_sentences, lowercase, and
                                  subwords (path, bytes, sha256) where a vocabulary was given
                                  rather than learned, or tokenizer_from ({file name: path,
                                  bytes, sha256}) where an imported model's tokenizers were
    record                        the feature names and reserved ids above
    vocabulary                    kind, file, bytes, sha256, entries, lowercase, sentences
                                  (learned from), sampled (from a sample of the train split);
                                  for kind "marian" (file vocabulary.txt) also models
                                  {"source": {"file", "bytes", "sha256"}, "target": ...}
    splits.{split}                pairs_read, pairs_kept, dropped {"empty", "too_long"},
                                  shortest and longest (of non-empty pairs), lengths (the
                                  kept pairs' histogram: {"length": count}), shards
                                  [{"file", "pairs", "bytes", "sha256"}], and but for train
                                  text {"source": {"file", "bytes", "sha256"}, "target": ...}

A pair is "empty" when a side has no subword (an empty line, or one of characters the
vocabulary's normalizer removes), "too_long" when its length exceeds `options.max_length`. So
the shards hold exactly the pairs `make_translation_dataset` keeps from the same text, except
for a side that holds characters but no subword, which that keeps as EOS alone.

`read_manifest` checks that every file it names is there with its recorded size;
`prepared_dataset` streams a split's shards into the trainer's batches; `prepared_length_counts`
gives the pairs per length that bucket boundaries and epoch sizes are computed from, without
reading the data; `prepared_vocabulary`, `prepared_text_files` and `check_vocabulary` give a run its
vocabulary and evaluation text, and refuse a run whose vocabulary is not the prepared one.
`input_text_files` gives the text files a corpus was prepared from, for `distill`.
"""

import hashlib
import json
import logging
from pathlib import Path

import numpy as np
import tensorflow as tf

from pipelines.batching import CHUNK_PAIRS, BatchingSettings
from pipelines.corpus import CorpusError
from pipelines.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from pipelines.translation_dataset import add_boundary_tokens

logger = logging.getLogger(__name__)

FORMAT = "keras-transformer-prepared"
FORMAT_VERSION = 1
MANIFEST_FILE = "manifest.json"
MARIAN_KIND = "marian"  # the vocabulary kind of an imported Marian model's tokenizers
RECORD = {
    "features": {"source": "int64 list: ids + EOS", "target": "int64 list: ids + EOS"},
    "pad_id": PAD_ID,
    "bos_id": BOS_ID,
    "eos_id": EOS_ID,
    "unk_id": UNK_ID,
}
FEATURES = {"source": tf.io.RaggedFeature(tf.int64), "target": tf.io.RaggedFeature(tf.int64)}
SHUFFLE_BUFFER = 65_536  # pairs; shards are samples of the whole corpus, so this mixes enough
INTERLEAVED_FILES = 4  # shards read at once by one input pipeline


def shard_name(split, index, count) -> str:
    return f"{split}-{index:05d}-of-{count:05d}.tfrecord"


def file_sha256(path) -> str:
    with open(path, "rb") as file:
        return hashlib.file_digest(file, "sha256").hexdigest()


def read_manifest(directory, verify_checksums=False) -> dict:
    """The manifest of a prepared directory, once its vocabulary and every shard are there with
    their recorded sizes (and, with `verify_checksums`, their sha256); errors name the file."""
    directory = Path(directory)
    path = directory / MANIFEST_FILE
    if not path.is_file():
        raise CorpusError(
            f"{directory} holds no {MANIFEST_FILE}: it is not a prepared directory, or its "
            "`keras-transformer prepare` did not finish"
        )
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CorpusError(f"{path} is not a readable manifest: {error}") from error
    if manifest.get("format") != FORMAT or manifest.get("format_version") != FORMAT_VERSION:
        raise CorpusError(
            f"{path} is not a {FORMAT} manifest of version {FORMAT_VERSION}: delete "
            f"{directory} and prepare it again"
        )
    try:
        files = [manifest["vocabulary"], *manifest["vocabulary"].get("models", {}).values()]
        for split in manifest["splits"].values():
            files += [*split["shards"], *split.get("text", {}).values()]
        for entry in files:
            _check_file(
                directory / entry["file"], entry["bytes"], entry["sha256"], verify_checksums
            )
    except (KeyError, TypeError) as error:
        raise CorpusError(
            f"{path} is incomplete ({error!r}): delete {directory} and prepare it again"
        ) from error
    return manifest


def _check_file(path, size, sha256, verify_checksums):
    again = f"delete {path.parent} and prepare it again"
    if not path.is_file():
        raise CorpusError(f"{path} is missing from the prepared directory: {again}")
    actual = path.stat().st_size
    if actual != size:
        raise CorpusError(
            f"{path} holds {actual} bytes where the manifest records {size}: it was truncated "
            f"or changed; {again}"
        )
    if verify_checksums and file_sha256(path) != sha256:
        raise CorpusError(f"{path} differs from the manifest's sha256: {again}")


def prepared_vocabulary(directory) -> Path:
    """The subword vocabulary file that the shards' ids index."""
    return Path(directory) / read_manifest(directory)["vocabulary"]["file"]


def prepared_text_files(directory) -> dict[str, tuple[Path, Path]]:
    """`{split: (source_path, target_path)}` of the splits whose text prepare kept (all but
    train), as `pipelines.datasets.corpus_files` gives them: for BLEU and `evaluate`."""
    directory = Path(directory)
    return {
        name: (
            directory / split["text"]["source"]["file"],
            directory / split["text"]["target"]["file"],
        )
        for name, split in read_manifest(directory)["splits"].items()
        if "text" in split
    }


def input_text_files(directory) -> dict[str, tuple[Path, Path]]:
    """`{split: (source_path, target_path)}` of the text files that a corpus of text pairs
    (`prepare --train` or `--dataset`) was prepared from, each checked to hold what it held
    then: `distill` translates their training split, the pairs its teacher learned."""
    manifest = read_manifest(directory)
    corpus = manifest["corpus"]
    if corpus["kind"] != "text":
        raise CorpusError(
            f"{directory} was prepared from a {corpus['kind']} corpus, not from a text file a "
            "side: distill reads the text a corpus was prepared from (text files or a dataset)"
        )
    return {
        split: tuple(
            _unchanged_input(corpus["inputs"][f"{split}.{side}"], directory)
            for side in ("source", "target")
        )
        for split in manifest["splits"]
    }


def _unchanged_input(entry, directory) -> Path:
    path = Path(entry["path"])
    if not path.is_file() or file_sha256(path) != entry["sha256"]:
        state = "changed" if path.is_file() else "gone"
        raise CorpusError(
            f"{path}, which {directory} was prepared from, has {state} since (its manifest "
            "records its sha256): restore it, or prepare the corpus again and train on that"
        )
    return path


def languages(directory) -> tuple[str, str]:
    """The (source, target) language labels the corpus was prepared with."""
    labels = read_manifest(directory)["languages"]
    return labels["source"], labels["target"]


def source_dataset(directory) -> str | None:
    """The corpus of the trainer's registry (`pipelines.datasets`) that `directory` was prepared
    from (`prepare --dataset`), or None for files of any other input."""
    return read_manifest(directory)["corpus"].get("dataset")


def text_files_of_pair(directory, source_language, target_language):
    """`prepared_text_files`, for a run of this language pair (`pipelines.datasets`' form)."""
    if (source_language, target_language) != languages(directory):
        raise CorpusError(
            f"{directory} was prepared for {'->'.join(languages(directory))}, not "
            f"{source_language}->{target_language}"
        )
    return prepared_text_files(directory)


def check_vocabulary(directory, subwords_path) -> None:
    """Raises CorpusError unless `subwords_path` is, byte for byte, the prepared vocabulary: the
    shards' ids would otherwise stand for other pieces."""
    prepared = prepared_vocabulary(directory)
    subwords_path = Path(subwords_path)
    if not subwords_path.is_file():
        raise CorpusError(f"subword vocabulary not found: {subwords_path}")
    if file_sha256(subwords_path) != file_sha256(prepared):
        raise CorpusError(
            f"{subwords_path} is not the vocabulary {directory} was prepared with ({prepared}): "
            "its ids would stand for other pieces. Train with the prepared vocabulary, or "
            "prepare the corpus again"
        )


def _split(manifest, directory, split) -> dict:
    if split not in manifest["splits"]:
        raise CorpusError(
            f"{directory} has no split {split!r}; its splits: {sorted(manifest['splits'])}"
        )
    return manifest["splits"][split]


def prepared_length_counts(directory, split="train", max_length=None) -> np.ndarray:
    """The kept pairs of a split per bucketing length (`counts[length]`, as
    `pipelines.batching.length_counts` gives them), from the manifest's histogram, without
    reading a shard: for `fitted_bucket_boundaries` and `full_batches_per_pass`. Its size is the
    longest length + 1, whatever the number of pairs. With `max_length`, only the pairs
    `prepared_dataset` keeps at that limit."""
    histogram = _split(read_manifest(directory), directory, split)["lengths"]
    kept = {
        int(length): count
        for length, count in histogram.items()
        if max_length is None or int(length) <= max_length
    }
    counts = np.zeros(max(kept, default=-1) + 1, dtype=np.int64)
    for length, count in kept.items():
        counts[length] = count
    return counts


def _parse_pairs(records):
    """Serialized Examples → a chunk of the model's elements (`add_boundary_tokens`' form), for
    `bucket_by_token_budget`: one parse op for many pairs."""
    features = tf.io.parse_example(records, FEATURES)
    source = tf.cast(features["source"], tf.int32)[:, :-1]  # ids, without the stored EOS
    target = tf.cast(features["target"], tf.int32)[:, :-1]
    return add_boundary_tokens(source, target)


def _check_pipeline_share(directory, split, entry, num_shards):
    """Refuses a split with fewer pairs than input pipelines: a share that holds no pair would
    keep a repeated dataset waiting for ever."""
    if entry["pairs_kept"] < num_shards:
        raise CorpusError(
            f"{directory}: split {split} holds {entry['pairs_kept']} pair(s), fewer than the "
            f"{num_shards} input pipelines that share it"
        )


def _pipeline_share(num_shards, shard_index):
    """The records of a shard file that are this input pipeline's, from `(file, offset)`
    elements, `offset` the pairs of the files before it: the pair at position p is the split's
    pair `offset + p`, this pipeline's when that is `shard_index` modulo `num_shards`. Records
    are skipped before they are parsed."""

    def records(file, offset):
        numbered = tf.data.TFRecordDataset(file).enumerate(start=offset)
        own = numbered.filter(lambda pair, _: pair % num_shards == shard_index)
        return own.map(lambda _, record: record)

    return records


def prepared_dataset(
    directory,
    split,
    batching: BatchingSettings,
    num_shards=1,
    shard_index=0,
    shuffle_buffer=SHUFFLE_BUFFER,
):
    """Bucketed, padded batches of a prepared split, with the elements, dtypes and batching of
    `make_translation_dataset`: `((source_ids, target_in_ids), target_out_ids)`, int32, PAD 0.

    Args:
        directory, split: a prepared directory (`pipelines.prepare`) and one of its splits.
        batching: the batches' `BatchingSettings`; pairs longer than its `max_length` are
            skipped (prepare dropped those over its own). Its shuffle shuffles the shard files
            and, through a buffer of `shuffle_buffer` pairs, the pairs each pass; its repeat
            comes after both shuffles.
        num_shards, shard_index: this input pipeline's share of the pairs (every
            num_shards-th, as `tf.distribute.InputContext`'s num_input_pipelines and
            input_pipeline_id give): equal shares, each read from every shard file.
    """
    directory = Path(directory)
    manifest = read_manifest(directory)
    entry = _split(manifest, directory, split)
    prepared_max_length = manifest["options"]["max_length"]
    if batching.max_length > prepared_max_length:
        logger.warning(
            "%s was prepared with max_length %d: its pairs longer than that were dropped then",
            directory,
            prepared_max_length,
        )
    _check_pipeline_share(directory, split, entry, num_shards)
    files = [str(directory / shard["file"]) for shard in entry["shards"]]
    offsets = np.cumsum([0] + [shard["pairs"] for shard in entry["shards"][:-1]])
    dataset = tf.data.Dataset.from_tensor_slices((files, offsets.astype(np.int64)))
    if batching.shuffle:
        dataset = dataset.shuffle(len(files), seed=batching.seed, reshuffle_each_iteration=True)
    read = (
        _pipeline_share(num_shards, shard_index)
        if num_shards > 1
        else lambda file, _: tf.data.TFRecordDataset(file)
    )
    dataset = dataset.interleave(
        read,
        cycle_length=min(INTERLEAVED_FILES, len(files)),
        num_parallel_calls=tf.data.AUTOTUNE,
    )
    if batching.shuffle:
        dataset = dataset.shuffle(shuffle_buffer, seed=batching.seed, reshuffle_each_iteration=True)
    if batching.repeat:
        # After the shuffles, so that each pass ends before the next begins: a buffer filled
        # across the boundary would give some pairs of the next pass before the last of this.
        dataset = dataset.repeat()
    dataset = dataset.batch(CHUNK_PAIRS).map(_parse_pairs, num_parallel_calls=tf.data.AUTOTUNE)
    dataset = dataset.apply(batching.bucketing())
    return dataset.with_options(batching.dataset_options()).prefetch(tf.data.AUTOTUNE)


def summary(manifest, directory) -> list[str]:
    """One line per split (pairs kept and dropped, shards), then the vocabulary's."""
    lines = []
    for name, split in manifest["splits"].items():
        dropped = split["dropped"]
        lines.append(
            f"{name}: {split['pairs_kept']} of {split['pairs_read']} pairs kept "
            f"({dropped['empty']} empty, {dropped['too_long']} longer than "
            f"{manifest['options']['max_length']} dropped), {len(split['shards'])} shard(s)"
        )
    vocabulary = manifest["vocabulary"]
    sample = f" learned from a sample of {vocabulary['sentences']} sentences,"
    lines.append(
        f"vocabulary: {vocabulary['kind']}, {vocabulary['entries']} entries,"
        f"{sample if vocabulary['sampled'] else ''} {Path(directory) / vocabulary['file']}"
    )
    return lines
