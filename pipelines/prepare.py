"""`keras-transformer prepare`: a parallel corpus tokenized once, so that training at WMT scale
(§5.1) streams token ids rather than tokenizing millions of pairs at every start.

The input (`corpus`) is one of:

- `TextPairs`: aligned text files of any language pair (languages are labels), plain or .gz, one
  sentence a line: `{split: (source, target)}`, a "train" split among them;
- `TsvPairs`: one file of `source<TAB>target` lines per split;
- `TfdsPairs`: a translation dataset of TensorFlow Datasets, by name, config and split names; its
  sides are its `supervised_keys`, else the two languages of its `Translation` feature.

`prepare` first checks the whole input (files there and not empty, UTF-8, line counts that
align, one tab a TSV line: errors name the file, the line and the value at fault). It then
trains the shared vocabulary once on the training split (BPE by default, as the paper, or for
the parsing corpus "ptb" its word vocabulary, as `train --dataset ptb` learns it; on a random
sample of `sample_sentences` sentences of a larger split), or adopts a given one (`subwords`: a
teacher's, for the pairs it distilled, which its student resumes on; `tokenizer_from`: an
imported Marian model's two SentencePiece models and shared vocabulary, which it is fine-tuned
on), tokenizes every split in the graph (sources with `tokenize`, targets with
`tokenize_target`), appends EOS, drops pairs with an empty side and pairs longer than `max_length`
(counted by reason, never an error, unless a split loses every pair), and writes the format that
`pipelines.prepared` describes, `manifest.json` last.

Everything is written into `OUTPUT.partial` beside the output directory, which is renamed into
place once complete: a killed prepare leaves no directory that looks prepared, and the next one
removes its leftovers (so run one prepare at a time into one directory). A rerun with the same
inputs (by sha256) and options returns the existing manifest and writes nothing; other inputs or
options into a prepared directory are an error, never a silent rebuild: delete the directory, or
choose another.
"""

import collections
import contextlib
import dataclasses
import functools
import json
import logging
import math
import os
import shutil
from pathlib import Path

import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds
from tqdm.auto import tqdm

from durable_files import write_atomically
from pipelines.corpus import CorpusError, iter_lines
from pipelines.marian_tokenizer import (
    SOURCE_MODEL,
    TARGET_MODEL,
    VOCABULARY,
    MarianTokenizer,
    holds_marian_tokenizer,
)
from pipelines.prepared import (
    FORMAT,
    FORMAT_VERSION,
    MANIFEST_FILE,
    MARIAN_KIND,
    RECORD,
    file_sha256,
    read_manifest,
    shard_name,
)
from pipelines.tokenizer import (
    EOS_ID,
    WORDPIECE_SUFFIX,
    SubwordTokenizer,
    check_sentencepiece_model,
    train_sentencepiece,
    train_wordpiece,
)

logger = logging.getLogger(__name__)

SIDES = ("source", "target")
VOCABULARY_FILES = {
    "bpe": "subwords.model",
    "unigram": "subwords.model",
    "word": "subwords.model",  # SentencePiece's word model: §6.3's parsing vocabulary
    "wordpiece": f"subwords{WORDPIECE_SUFFIX}",
}
READ_BATCH = 4096  # sentences read, tokenized and written a step
SAMPLE_SEED = 0  # the vocabulary's sample of a large training split is the same every run
SPLIT_ORDER = ("train", "validation", "test")


# The inputs. Each gives its manifest entry (`describe`), its pairs per split once checked
# (`check`), its two language labels and a split's pairs as a tf.data.Dataset of two strings.


@dataclasses.dataclass
class TextPairs:
    """Aligned text files, plain or .gz: `{split: (source_path, target_path)}`; `dataset`: the
    corpus of the trainer's registry they are (`pipelines.datasets`), if any, which the manifest
    records, so that a run on the shards learns its task (ptb: parsing, §6.3)."""

    files: dict
    languages: tuple[str, str] = SIDES
    dataset: str | None = None
    kind = "text"

    def describe(self) -> dict:
        inputs = {
            f"{split}.{side}": _file_input(path)
            for split, paths in self.files.items()
            for side, path in zip(SIDES, paths, strict=True)
        }
        named = {"dataset": self.dataset} if self.dataset else {}
        return {"kind": self.kind, **named, "inputs": inputs}

    def check(self) -> dict[str, int]:
        return {split: _aligned_line_count(*paths) for split, paths in self.files.items()}

    def language_pair(self) -> tuple[str, str]:
        return tuple(self.languages)

    def pairs(self, split) -> tf.data.Dataset:
        return tf.data.Dataset.zip(*(_text_lines(path) for path in self.files[split]))


@dataclasses.dataclass
class TsvPairs:
    """Files of `source<TAB>target` lines, plain or .gz: `{split: path}`."""

    files: dict
    languages: tuple[str, str] = SIDES
    kind = "tsv"

    def describe(self) -> dict:
        inputs = {split: _file_input(path) for split, path in self.files.items()}
        return {"kind": self.kind, "inputs": inputs}

    def check(self) -> dict[str, int]:
        return {split: _scan_lines(path, _check_tsv_line) for split, path in self.files.items()}

    def language_pair(self) -> tuple[str, str]:
        return tuple(self.languages)

    def pairs(self, split) -> tf.data.Dataset:
        return _text_lines(self.files[split]).map(_split_at_tab)


@dataclasses.dataclass
class TfdsPairs:
    """A TFDS translation dataset: `tfds.builder(name, config=config, data_dir=data_dir)`,
    downloaded and prepared if it is not yet. `splits`: `{split: TFDS split}` (default train,
    and validation and test where the dataset has them); `languages`: the two features to read
    as source and target (default its supervised keys)."""

    name: str
    config: str | None = None
    data_dir: str | None = None
    splits: dict | None = None
    languages: tuple[str, str] | None = None
    kind = "tfds"

    @functools.cached_property
    def builder(self):
        label = f"{self.name}/{self.config}" if self.config else self.name
        try:
            builder = tfds.builder(self.name, config=self.config, data_dir=self.data_dir)
            builder.download_and_prepare()
        except Exception as error:  # TFDS raises unknown-name, network and checksum errors alike
            raise CorpusError(f"TFDS dataset {label} could not be prepared: {error}") from error
        return builder

    @functools.cached_property
    def split_names(self) -> dict:
        available = self.builder.info.splits
        names = self.splits or {s: s for s in SPLIT_ORDER if s in available}
        missing = sorted(set(names.values()) - set(available))
        if missing or "train" not in names:
            raise CorpusError(
                f"TFDS dataset {self.builder.info.full_name} has splits {sorted(available)}; "
                f"asked for {names} (a train split among them)"
            )
        return names

    def describe(self) -> dict:
        data_dir = Path(str(self.builder.data_dir))
        files = sorted(path for path in data_dir.rglob("*") if path.is_file())
        return {
            "kind": self.kind,
            "name": self.builder.name,
            "config": self.builder.builder_config.name if self.builder.builder_config else None,
            "version": str(self.builder.version),
            "splits": self.split_names,
            "data_dir": str(data_dir),
            "inputs": {str(path.relative_to(data_dir)): _file_input(path) for path in files},
        }

    def check(self) -> dict[str, int]:
        counts = {
            split: self.builder.info.splits[name].num_examples
            for split, name in self.split_names.items()
        }
        for split, count in counts.items():
            if not count:
                raise CorpusError(f"TFDS dataset {self.builder.info.full_name}: {split} is empty")
        return counts

    def language_pair(self) -> tuple[str, str]:
        return _tfds_languages(self.builder.info, self.languages)

    def pairs(self, split) -> tf.data.Dataset:
        source, target = self.language_pair()
        examples = self.builder.as_dataset(split=self.split_names[split], shuffle_files=False)
        return examples.map(lambda example: (example[source], example[target]))


def _tfds_languages(info, asked) -> tuple[str, str]:
    """The source and target features: those asked for, else the supervised keys, else the two
    languages of a `Translation` feature (in its order, which is alphabetical)."""
    features = sorted(info.features.keys())
    if asked and all(asked):
        unknown = [language for language in asked if language not in features]
        if unknown:
            raise CorpusError(f"{info.full_name} has no feature {unknown}; features: {features}")
        return tuple(asked)
    keys = info.supervised_keys
    if isinstance(keys, tuple) and len(keys) == 2 and all(isinstance(k, str) for k in keys):
        return keys
    languages = getattr(info.features, "languages", None)
    if languages and len(languages) == 2:
        logger.info("%s: translating %s into %s", info.full_name, *languages)
        return tuple(languages)
    raise CorpusError(
        f"{info.full_name} has no supervised keys nor one Translation feature of two "
        f"languages: name the source and target features among {features}"
    )


def corpus_description(
    train=None,
    tsv=None,
    tfds_name=None,
    validation=None,
    test=None,
    languages=(None, None),
    tfds_data_dir=None,
    splits=None,
    dataset=None,
    data_dir=None,
):
    """The input of `prepare` from the command line's options: `train` (source, target files),
    `tsv` (one file), `tfds_name` ("name" or "name/config") or `dataset` (a corpus the trainer
    names, `pipelines.datasets`, read from `data_dir` or its default place); `validation`,
    `test`: files of the same kind; `languages`: labels, or the features of a TFDS dataset."""
    if sum(given is not None for given in (train, tsv, tfds_name, dataset)) != 1:
        raise CorpusError(
            "give one training input: source and target files, a TSV file, TFDS or a dataset"
        )
    if tfds_name is None and (tfds_data_dir or splits):
        raise CorpusError("a TFDS data directory and TFDS split names need a TFDS dataset")
    if dataset is not None:
        if validation or test:
            raise CorpusError(f"the validation and test splits of {dataset} are its own")
        return _named_corpus(dataset, data_dir, languages)
    if data_dir is not None:
        raise CorpusError("a data directory goes with a dataset the trainer names")
    if tfds_name is not None:
        if validation or test:
            raise CorpusError("a TFDS dataset's validation and test come from its split names")
        name, _, config = tfds_name.partition("/")
        return TfdsPairs(name, config or None, tfds_data_dir, splits, _labels(languages, None))
    other = {"validation": validation, "test": test}
    if train is not None:
        return _text_corpus({"train": train, **other}, _labels(languages, SIDES))
    return _tsv_corpus({"train": [tsv], **other}, _labels(languages, SIDES))


def _named_corpus(dataset, data_dir, languages) -> TextPairs:
    """The splits of a dataset of the trainer's registry, as text pairs (Multi30k is downloaded
    where it is missing, as `train` does)."""
    from pipelines import datasets

    data_dir = data_dir or datasets.default_data_dir(dataset)
    defaults = datasets.default_languages(dataset, data_dir)
    source, target = (given or default for given, default in zip(languages, defaults, strict=True))
    files = datasets.corpus_files(dataset, data_dir, source, target)
    return TextPairs(files, (source, target), dataset)


def _vocabulary_kind(corpus, asked) -> str:
    """The vocabulary `prepare` trains for `corpus`: `asked`, else its dataset's kind (ptb:
    word), else BPE. A dataset of word vocabulary takes no other: the parser's search and tree
    repair count the input's words, one id each (`train --dataset ptb` trains the same)."""
    from pipelines import datasets

    named = getattr(corpus, "dataset", None)
    own = datasets.vocabulary_kind(named) if named else None
    if own == "word" and asked not in (None, own):
        raise CorpusError(
            f"{named} needs a word vocabulary (one token per word, as `train --dataset {named}` "
            f"trains), not {asked}: leave the vocabulary unset"
        )
    return asked or own or "bpe"


def _text_corpus(files, languages) -> TextPairs:
    files = {split: tuple(paths) for split, paths in files.items() if paths}
    wrong = [split for split, paths in files.items() if len(paths) != 2]
    if wrong:
        raise CorpusError(f"the {wrong} split(s) need two files: source and target")
    return TextPairs(files, languages)


def _tsv_corpus(files, languages) -> TsvPairs:
    files = {split: paths for split, paths in files.items() if paths}
    wrong = [split for split, paths in files.items() if len(paths) != 1]
    if wrong:
        raise CorpusError(f"the {wrong} split(s) of a TSV corpus need one file each")
    return TsvPairs({split: paths[0] for split, paths in files.items()}, languages)


def _labels(languages, default):
    languages = tuple(languages or (None, None))
    if any(languages) and not all(languages):
        raise CorpusError("name both languages (source and target), or neither")
    return languages if all(languages) else default


# Checking the input files.


def _file_input(path) -> dict:
    """A file's entry in the manifest; its sha256 tells a rerun whether it changed."""
    path = Path(path)
    if not path.is_file():
        raise CorpusError(f"corpus file not found: {path}")
    return {"path": str(path.absolute()), "bytes": path.stat().st_size, "sha256": file_sha256(path)}


def _check_tsv_line(text, path, line):
    tabs = text.count("\t")
    if tabs != 1:
        raise CorpusError(
            f"{path}, line {line}: a TSV line is source<TAB>target, this one has {tabs} tabs: "
            f"{text.rstrip(chr(10))[:80]!r}"
        )


def _scan_lines(path, check_line=None) -> int:
    """The lines of a plain or gzipped UTF-8 file, once each decodes (and passes `check_line`);
    an empty file, or one of blank lines only, is an error."""
    lines = sentences = 0
    for lines, text in enumerate(iter_lines(path), start=1):  # noqa: B007 (counted after)
        if check_line:
            check_line(text, path, lines)
        sentences += bool(text.strip())
    if not sentences:
        raise CorpusError(f"{path} is empty: it holds no sentence")
    return lines


def _aligned_line_count(source_path, target_path) -> int:
    counts = _scan_lines(source_path), _scan_lines(target_path)
    if counts[0] != counts[1]:
        raise CorpusError(
            f"line counts differ: {source_path} has {counts[0]} lines, "
            f"{target_path} has {counts[1]}"
        )
    return counts[0]


def _text_lines(path) -> tf.data.Dataset:
    compression = "GZIP" if Path(path).suffix == ".gz" else ""
    return tf.data.TextLineDataset(str(path), compression_type=compression)


def _split_at_tab(line):
    parts = tf.strings.split(line, "\t")  # exactly two: `check` saw one tab a line
    return parts[0], parts[1]


# The vocabulary.


def _sample(pairs: int, sample_sentences: int) -> np.ndarray | None:
    """Which training pairs the vocabulary learns from: all (None) when their sentences fit in
    `sample_sentences`, else a random `sample_sentences // 2` of them."""
    if 2 * pairs <= sample_sentences:
        return None
    chosen = np.zeros(pairs, dtype=bool)
    rng = np.random.default_rng(SAMPLE_SEED)
    chosen[rng.choice(pairs, size=max(1, sample_sentences // 2), replace=False)] = True
    return chosen


def _write_training_text(pairs, chosen, directory) -> tuple[list[Path], int]:
    """The chosen pairs' sentences as one file per side, blank lines left out; and how many."""
    paths = [directory / f"vocabulary.{side}.txt" for side in SIDES]
    written, offset = 0, 0
    with contextlib.ExitStack() as stack:
        files = [stack.enter_context(path.open("w", encoding="utf-8")) for path in paths]
        for batch in pairs.batch(READ_BATCH).as_numpy_iterator():
            rows = slice(None) if chosen is None else chosen[offset : offset + len(batch[0])]
            offset += len(batch[0])
            for file, sentences in zip(files, batch, strict=True):
                lines = [_one_line(raw) for raw in sentences[rows]]
                file.writelines(f"{line}\n" for line in lines if line)
                written += sum(map(bool, lines))
    return paths, written


def _one_line(raw: bytes) -> str:
    return " ".join(raw.decode("utf-8").split("\n")).strip()


def _train_vocabulary(corpus, train_pairs, directory, options):
    """Trains the shared vocabulary on the training split (a sample of a large one); its
    manifest entry and its tokenizer."""
    kind, size = options["vocabulary"], options["vocab_size"]
    chosen = _sample(train_pairs, options["sample_sentences"])
    scratch = directory / "vocabulary-text"
    scratch.mkdir()
    files, sentences = _write_training_text(corpus.pairs("train"), chosen, scratch)
    if chosen is not None:
        logger.info(
            "training the %s vocabulary on a random sample of %d of %d training pairs "
            "(%d sentences; sample_sentences=%d)",
            kind,
            int(chosen.sum()),
            train_pairs,
            sentences,
            options["sample_sentences"],
        )
    path = directory / VOCABULARY_FILES[kind]
    try:
        if kind == "wordpiece":
            train_wordpiece(files, path, size)
        else:
            train_sentencepiece(files, path, size, model_type=kind, lowercase=options["lowercase"])
    except RuntimeError as error:  # SentencePiece: a vocabulary too large for the text
        raise CorpusError(f"training a {kind} vocabulary of {size} failed: {error}") from error
    shutil.rmtree(scratch)
    return _vocabulary_entry(path, options, sentences, sampled=chosen is not None)


def _given_vocabulary(path, directory, options):
    """The SentencePiece model `path` (a teacher run's `subwords.model`: its student's ids must
    be the teacher's), copied as it is; its manifest entry and its tokenizer."""
    kind = options["vocabulary"]
    try:
        check_sentencepiece_model(path, kind, options["lowercase"])
    except (OSError, ValueError) as error:
        raise CorpusError(f"the given vocabulary {path}: {error}") from error
    copy = directory / VOCABULARY_FILES[kind]
    shutil.copyfile(path, copy)
    return _vocabulary_entry(copy, options, sentences=0, sampled=False)


def _marian_tokenizer_input(directory, vocabulary, subwords, lowercase) -> dict:
    """The manifest's record of the imported model's tokenizer files in `directory` (a run's,
    `tokenizer_from`), which replace a vocabulary of ours."""
    if vocabulary or subwords or lowercase:
        raise CorpusError(
            "tokenizer_from gives the vocabulary: leave vocabulary, subwords and lowercase unset"
        )
    if not holds_marian_tokenizer(directory):
        raise CorpusError(
            f"tokenizer_from {directory} holds no imported model's tokenizers ({SOURCE_MODEL}, "
            f"{TARGET_MODEL}, {VOCABULARY}); a run's subwords.model is given as subwords"
        )
    return {
        name: _file_input(Path(directory) / name)
        for name in (SOURCE_MODEL, TARGET_MODEL, VOCABULARY)
    }


def _given_marian_tokenizer(files, directory):
    """Copies an imported model's tokenizer files (`files`: their manifest record) into
    `directory`; their manifest entry and their tokenizer."""
    for name, entry in files.items():
        shutil.copyfile(entry["path"], directory / name)
    tokenizer = MarianTokenizer(directory)
    entry = {
        "kind": MARIAN_KIND,
        **_file_entry(directory / VOCABULARY),
        "models": {
            "source": _file_entry(directory / SOURCE_MODEL),
            "target": _file_entry(directory / TARGET_MODEL),
        },
        "entries": tokenizer.vocab_size,
        "lowercase": False,
        "sentences": 0,
        "sampled": False,
    }
    return entry, tokenizer


def _vocabulary_entry(path, options, sentences, sampled):
    """The manifest entry of the vocabulary file `path`, learned from `sentences` (0: given),
    and its tokenizer."""
    tokenizer = SubwordTokenizer(path)
    entry = {
        "kind": options["vocabulary"],
        **_file_entry(path),
        "entries": tokenizer.vocab_size,
        "lowercase": options["lowercase"],
        "sentences": sentences,
        "sampled": sampled,
    }
    return entry, tokenizer


# Tokenizing and writing one split.


def _with_eos(ids):
    eos = tf.fill([ids.nrows(), 1], tf.constant(EOS_ID, ids.dtype))
    return tf.concat([ids, eos], axis=1)


def _tokenized_batches(pairs, tokenizer) -> tf.data.Dataset:
    """Batches of (sources, targets, then each side's ids + EOS as values and row splits)."""

    def tokenize(sources, targets):
        sides = ((tokenizer.tokenize, sources), (tokenizer.tokenize_target, targets))
        ids = [_with_eos(tokenize(tf.strings.strip(side))) for tokenize, side in sides]
        return sources, targets, ids[0].values, ids[0].row_splits, ids[1].values, ids[1].row_splits

    return (
        pairs.batch(READ_BATCH)
        .map(tokenize, num_parallel_calls=tf.data.AUTOTUNE)
        .prefetch(tf.data.AUTOTUNE)
    )


def _serialized_pair(source, target) -> bytes:
    """One record: a `tf.train.Example` of the two int64 lists (`pipelines.prepared`)."""
    example = tf.train.Example()
    features = example.features.feature
    # Filling the message in place serializes several times faster than building its parts.
    features["source"].int64_list.value.extend(source.tolist())
    features["target"].int64_list.value.extend(target.tolist())
    return example.SerializeToString()


@dataclasses.dataclass
class _SplitWriter:
    """Deals one split's kept pairs round-robin over its shard writers, counting as it goes."""

    writers: list
    text_files: list | None
    max_length: int
    read: int = 0
    empty: int = 0
    too_long: int = 0
    shortest: int | None = None
    longest: int | None = None
    lengths: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    shard_pairs: list = dataclasses.field(init=False)

    def __post_init__(self):
        self.shard_pairs = [0] * len(self.writers)

    def add(self, batch):
        sources, targets, source_ids, source_splits, target_ids, target_splits = batch
        source_lengths, target_lengths = np.diff(source_splits), np.diff(target_splits)
        lengths = np.maximum(source_lengths, target_lengths)  # with BOS/EOS, as the trainer buckets
        empty = np.minimum(source_lengths, target_lengths) == 1  # EOS alone
        kept = ~empty & (lengths <= self.max_length)
        self._count(lengths, empty, kept)
        for row in np.flatnonzero(kept):
            source = source_ids[source_splits[row] : source_splits[row + 1]]
            target = target_ids[target_splits[row] : target_splits[row + 1]]
            shard = (self.read + int(row)) % len(self.writers)
            self.writers[shard].write(_serialized_pair(source, target))
            self.shard_pairs[shard] += 1
        if self.text_files:
            for file, sentences in zip(self.text_files, (sources, targets), strict=True):
                file.writelines(f"{_one_line(raw)}\n" for raw in sentences)
        self.read += len(sources)

    def _count(self, lengths, empty, kept):
        self.empty += int(empty.sum())
        self.too_long += int((~empty & ~kept).sum())
        self.lengths.update(lengths[kept].tolist())
        seen = lengths[~empty]
        if seen.size:
            low, high = int(seen.min()), int(seen.max())
            self.shortest = low if self.shortest is None else min(self.shortest, low)
            self.longest = high if self.longest is None else max(self.longest, high)


def _all_dropped(split, writer, max_length) -> CorpusError:
    if writer.longest is None:
        return CorpusError(f"every one of the {writer.read} {split} pairs has an empty side")
    return CorpusError(
        f"every one of the {writer.read} {split} pairs was dropped: {writer.empty} with an "
        f"empty side, {writer.too_long} longer than max_length {max_length} (their lengths, "
        f"EOS included, run from {writer.shortest} to {writer.longest} subwords): raise "
        "max_length"
    )


def _file_entry(path) -> dict:
    return {"file": path.name, "bytes": path.stat().st_size, "sha256": file_sha256(path)}


def _write_pairs(pairs, tokenizer, shards, texts, max_length, progress) -> _SplitWriter:
    """Tokenizes `pairs` into the `shards` (and their text into `texts`), counting."""
    with contextlib.ExitStack() as stack:
        writers = [stack.enter_context(tf.io.TFRecordWriter(str(path))) for path in shards]
        text_files = [stack.enter_context(path.open("w", encoding="utf-8")) for path in texts]
        writer = _SplitWriter(writers, text_files, max_length)
        for batch in _tokenized_batches(pairs, tokenizer).as_numpy_iterator():
            writer.add(batch)
            progress.update(len(batch[0]))
    return writer


def _split_entry(writer, shards, texts) -> dict:
    entry = {
        "pairs_read": writer.read,
        "pairs_kept": sum(writer.lengths.values()),
        "dropped": {"empty": writer.empty, "too_long": writer.too_long},
        "shortest": writer.shortest,
        "longest": writer.longest,
        "lengths": {str(length): writer.lengths[length] for length in sorted(writer.lengths)},
        "shards": [
            {**_file_entry(path), "pairs": pairs}
            for path, pairs in zip(shards, writer.shard_pairs, strict=True)
        ],
    }
    if texts:
        entry["text"] = {side: _file_entry(path) for side, path in zip(SIDES, texts, strict=True)}
    return entry


def _write_split(corpus, split, expected, tokenizer, directory, options) -> dict:
    """Writes one split's shards (and, but for train, its text); its manifest entry."""
    count = max(1, math.ceil(expected / options["shard_pairs"]))
    shards = [directory / shard_name(split, index, count) for index in range(count)]
    texts = [] if split == "train" else [directory / f"{split}.{side}.txt" for side in SIDES]
    max_length = options["max_length"]
    description = f"{split}: tokenizing, writing"
    # disable=None: a progress bar on a terminal only, not in logs.
    with tqdm(total=expected, desc=description, unit="pairs", disable=None) as progress:
        writer = _write_pairs(corpus.pairs(split), tokenizer, shards, texts, max_length, progress)
    if writer.read != expected:
        raise CorpusError(f"{split}: read {writer.read} pairs where its check counted {expected}")
    if not writer.lengths:
        raise _all_dropped(split, writer, max_length)
    logger.info(
        "%s: kept %d of %d pairs (%d with an empty side, %d longer than %d) in %d shard(s)",
        split,
        sum(writer.lengths.values()),
        writer.read,
        writer.empty,
        writer.too_long,
        max_length,
        count,
    )
    return _split_entry(writer, shards, texts)


# The prepared directory: reuse, build, rename into place.


def _checked_options(vocabulary, vocab_size, max_length, shard_pairs, sample_sentences, lowercase):
    if vocabulary not in VOCABULARY_FILES:
        raise CorpusError(f"unknown vocabulary {vocabulary!r}; kinds: {sorted(VOCABULARY_FILES)}")
    if lowercase and vocabulary == "wordpiece":
        raise CorpusError("lowercase needs a SentencePiece vocabulary (bpe, unigram or word)")
    minimums = {"vocab_size": 8, "max_length": 2, "shard_pairs": 1, "sample_sentences": 2}
    values = {
        "vocab_size": vocab_size,
        "max_length": max_length,
        "shard_pairs": shard_pairs,
        "sample_sentences": sample_sentences,
    }
    for name, value in values.items():
        if value < minimums[name]:
            raise CorpusError(f"{name} {value} is below {minimums[name]}")
    return {"vocabulary": vocabulary, **values, "lowercase": lowercase}


def _identity(manifest) -> dict:
    """What decides a prepared directory's content: format, inputs' contents, options."""

    def without_locations(value):
        if not isinstance(value, dict):
            return value
        return {k: without_locations(v) for k, v in value.items() if k not in ("path", "data_dir")}

    names = ("format", "format_version", "languages", "options")
    return {
        **{name: manifest.get(name) for name in names},
        "corpus": without_locations(manifest.get("corpus")),
    }


def _flattened(value, prefix="") -> dict:
    if not isinstance(value, dict):
        return {prefix: value}
    return {
        key: leaf
        for name, item in value.items()
        for key, leaf in _flattened(item, f"{prefix}.{name}" if prefix else name).items()
    }


def _existing_manifest(output_dir) -> dict | None:
    """The manifest of a prepared `output_dir`; None where there is nothing (or an empty
    directory) to prepare into."""
    path = output_dir / MANIFEST_FILE
    if path.is_file():
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise CorpusError(f"{path} is not a readable manifest: {error}") from error
    if output_dir.exists() and (not output_dir.is_dir() or any(output_dir.iterdir())):
        raise CorpusError(
            f"{output_dir} exists and is not a prepared directory (no {MANIFEST_FILE}): "
            "choose another output directory, or empty it"
        )
    return None


def _reused(existing, head, output_dir) -> dict:
    """The existing manifest, if it was prepared from the same inputs and options."""
    before, now = _flattened(_identity(existing)), _flattened(_identity(head))
    if "corpus.dataset" not in before:  # prepared before the dataset's name was recorded
        now.pop("corpus.dataset", None)
    differences = [
        f"{key}: {before.get(key)!r} then, {now.get(key)!r} now"
        for key in sorted(set(before) | set(now))
        if before.get(key) != now.get(key)
    ]
    if differences:
        raise CorpusError(
            f"{output_dir} was prepared from other inputs or options ("
            + "; ".join(differences[:5])
            + f"): delete {output_dir} to prepare it again, or choose another output directory"
        )
    read_manifest(output_dir)  # its shards still whole
    logger.info("%s is prepared from these inputs and options already: nothing to do", output_dir)
    return existing


def _fresh_partial(output_dir) -> Path:
    partial = output_dir.with_name(f"{output_dir.name}.partial")
    if partial.exists():
        logger.warning("removing %s, left by a prepare that did not finish", partial)
        shutil.rmtree(partial)
    partial.mkdir(parents=True)
    return partial


def _discard(partial):
    """Removes what a failed prepare wrote (a killed one leaves it for the next to remove)."""
    shutil.rmtree(partial, ignore_errors=True)


def _ordered(counts) -> dict:
    return dict(sorted(counts.items(), key=lambda item: item[0] != "train"))


def _build(directory, corpus, counts, head) -> dict:
    options = head["options"]
    if "tokenizer_from" in options:
        vocabulary, tokenizer = _given_marian_tokenizer(options["tokenizer_from"], directory)
    elif "subwords" in options:
        given = options["subwords"]["path"]
        vocabulary, tokenizer = _given_vocabulary(given, directory, options)
    else:
        vocabulary, tokenizer = _train_vocabulary(corpus, counts["train"], directory, options)
    splits = {
        split: _write_split(corpus, split, expected, tokenizer, directory, options)
        for split, expected in _ordered(counts).items()
    }
    manifest = {**head, "vocabulary": vocabulary, "splits": splits}
    text = json.dumps(manifest, indent=2) + "\n"
    write_atomically(directory / MANIFEST_FILE, lambda path: path.write_text(text, "utf-8"))
    return manifest


def prepare(
    output_dir,
    corpus,
    vocabulary=None,
    vocab_size=8000,
    max_length=256,
    shard_pairs=100_000,
    sample_sentences=1_000_000,
    lowercase=False,
    subwords=None,
    tokenizer_from=None,
) -> dict:
    """Prepares `corpus` (`TextPairs`, `TsvPairs` or `TfdsPairs`) into `output_dir`; returns its
    manifest (see the module docstring and `pipelines.prepared`).

    Args:
        vocabulary: "bpe", "unigram" or "word" (SentencePiece), or "wordpiece"; default: the
            kind of the corpus's dataset (ptb: word), else BPE.
        vocab_size: entries of the shared vocabulary (WordPiece may learn fewer).
        max_length: pairs whose longer side, with EOS (BOS on the target's input), is longer are
            dropped and counted.
        shard_pairs: the most pairs read into one shard file.
        sample_sentences: the vocabulary learns from at most this many training sentences.
        lowercase: a case-folding SentencePiece model.
        subwords: a SentencePiece model of that kind and case folding to use rather than learn
            one (then `vocab_size` and `sample_sentences` go unused); its checksum is an input.
        tokenizer_from: a directory holding an imported Marian model's tokenizers (source.spm,
            target.spm, vocabulary.txt: its run's), to tokenize with rather than a vocabulary of
            ours (`pipelines.MarianTokenizer`); their checksums are inputs.
    """
    output_dir = Path(output_dir).absolute()
    options = _checked_options(
        _vocabulary_kind(corpus, vocabulary),
        vocab_size,
        max_length,
        shard_pairs,
        sample_sentences,
        lowercase,
    )
    if subwords is not None:  # only then: a manifest prepared before this option still matches
        if not Path(subwords).is_file():
            raise CorpusError(f"vocabulary file not found: {subwords}")
        options["subwords"] = _file_input(subwords)
    if tokenizer_from is not None:
        files = _marian_tokenizer_input(tokenizer_from, vocabulary, subwords, lowercase)
        options.update(vocabulary=MARIAN_KIND, tokenizer_from=files)
    existing = _existing_manifest(output_dir)
    head = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "corpus": corpus.describe(),
        "languages": dict(zip(SIDES, corpus.language_pair(), strict=True)),
        "options": options,
        "record": RECORD,
    }
    if existing is not None:
        return _reused(existing, head, output_dir)
    counts = corpus.check()
    if "train" not in counts:
        raise CorpusError(f"a corpus needs a train split; it has {sorted(counts)}")
    partial = _fresh_partial(output_dir)
    try:
        manifest = _build(partial, corpus, counts, head)
        os.replace(partial, output_dir)
    except BaseException:
        _discard(partial)
        raise
    logger.info("prepared %s", output_dir)
    return manifest
