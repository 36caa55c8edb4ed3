"""`prepare` and its reader: an invented language pair in two non-Latin scripts, tokenized once into
shards that stream back as exactly the batches the trainer makes from the text; TSV and TFDS
input; reruns, failures and bad input that leave nothing half-written."""

import collections
import gzip
import json
import logging
import shutil

import numpy as np
import pytest
import tensorflow_datasets as tfds

from invented_language import invented_pairs, write_pairs, write_side
from keras_transformer import cli
from pipelines import prepare as prepare_module
from pipelines.batching import (
    BatchingSettings,
    fitted_bucket_boundaries,
    full_batches_per_pass,
    length_counts,
)
from pipelines.corpus import CorpusError, read_aligned_lines
from pipelines.prepare import TextPairs, TfdsPairs, TsvPairs, corpus_description, prepare
from pipelines.prepared import (
    check_vocabulary,
    prepared_dataset,
    prepared_length_counts,
    prepared_text_files,
    read_manifest,
)
from pipelines.tokenizer import SubwordTokenizer, train_sentencepiece
from pipelines.translation_dataset import make_translation_dataset, pair_lengths

MAX_LENGTH = 48
VOCAB_SIZE = 200
OPTIONS = {"vocab_size": VOCAB_SIZE, "max_length": MAX_LENGTH, "shard_pairs": 64}
LONG_PAIRS = 4  # 60 words: over MAX_LENGTH whatever the segmentation
EMPTY_PAIRS = 3


def write_tsv(path, pairs):
    return write_side(path, [f"{source}\t{target}" for source, target in pairs])


TRAIN = invented_pairs(320, seed=1, long_pairs=LONG_PAIRS, empty_pairs=EMPTY_PAIRS)
VALIDATION = invented_pairs(40, seed=2, long_pairs=1)
TEST = invented_pairs(40, seed=3)


@pytest.fixture(scope="module")
def invented(tmp_path_factory) -> dict:
    """`{split: (xx, yy)}`, plain and gzipped files mixed."""
    directory = tmp_path_factory.mktemp("invented")
    return {
        "train": write_pairs(directory, "train", TRAIN, (".gz", "")),
        "validation": write_pairs(directory, "valid", VALIDATION),
        "test": write_pairs(directory, "test", TEST, (".gz", ".gz")),
    }


@pytest.fixture(scope="module")
def prepared(tmp_path_factory, invented):
    output = tmp_path_factory.mktemp("prepared") / "xx-yy"
    prepare(output, TextPairs(invented, ("xx", "yy")), **OPTIONS)
    return output


@pytest.fixture(scope="module")
def prepared_tokenizer(prepared):
    return SubwordTokenizer(prepared / "subwords.model")


def pair_rows(dataset) -> collections.Counter:
    """Each real (not padding) row of a dataset's batches, unpadded, counted."""
    rows = collections.Counter()
    for (source, target_in), target_out in dataset.as_numpy_iterator():
        for row in zip(source, target_in, target_out, strict=True):
            if row[0].any():
                rows[tuple(tuple(ids[ids != 0]) for ids in row)] += 1
    return rows


def trainer_rows(files, tokenizer) -> collections.Counter:
    dataset = make_translation_dataset(*files, tokenizer, BatchingSettings(512, MAX_LENGTH))
    return pair_rows(dataset)


def modification_times(directory) -> dict:
    return {path: path.stat().st_mtime_ns for path in directory.rglob("*")}


# What prepare writes, read back.


@pytest.mark.parametrize("split", ["train", "validation", "test"])
def test_the_shards_stream_the_batches_the_trainer_makes_from_the_text(
    prepared, prepared_tokenizer, invented, split
):
    dataset = prepared_dataset(prepared, split, BatchingSettings(512, MAX_LENGTH))
    expected = make_translation_dataset(
        *invented[split], prepared_tokenizer, BatchingSettings(512, MAX_LENGTH)
    )
    assert dataset.element_spec == expected.element_spec
    assert pair_rows(dataset) == pair_rows(expected)


def test_the_manifest_counts_every_pair_and_its_length(prepared, prepared_tokenizer, invented):
    manifest = read_manifest(prepared, verify_checksums=True)
    assert manifest["languages"] == {"source": "xx", "target": "yy"}
    assert manifest["vocabulary"]["entries"] == VOCAB_SIZE
    assert manifest["vocabulary"]["sampled"] is False
    assert manifest["options"]["max_length"] == MAX_LENGTH
    for split, pairs in {"train": TRAIN, "validation": VALIDATION, "test": TEST}.items():
        entry = manifest["splits"][split]
        lengths = pair_lengths(*invented[split], prepared_tokenizer)  # the non-empty pairs
        kept = lengths[lengths <= MAX_LENGTH]
        assert entry["pairs_read"] == len(pairs)
        assert entry["dropped"]["empty"] == len(pairs) - len(lengths)
        assert entry["dropped"]["too_long"] == len(lengths) - len(kept)
        assert entry["pairs_kept"] == len(kept) == sum(s["pairs"] for s in entry["shards"])
        assert (entry["shortest"], entry["longest"]) == (lengths.min(), lengths.max())
        assert entry["lengths"] == {str(k): v for k, v in sorted(collections.Counter(kept).items())}
        assert np.array_equal(prepared_length_counts(prepared, split), length_counts(kept))
    train = manifest["splits"]["train"]
    assert train["dropped"] == {"empty": EMPTY_PAIRS, "too_long": LONG_PAIRS}
    shards = [shard["file"] for shard in train["shards"]]
    assert shards == [f"train-{i:05d}-of-00006.tfrecord" for i in range(6)]  # 327 pairs / 64
    assert all(shard["pairs"] <= OPTIONS["shard_pairs"] for shard in train["shards"])
    assert "text" not in train


def test_the_text_of_the_evaluation_splits_is_kept_for_bleu(prepared, invented):
    files = prepared_text_files(prepared)
    assert sorted(files) == ["test", "validation"]
    for split, paths in files.items():
        assert read_aligned_lines(*paths) == read_aligned_lines(*invented[split])


def test_buckets_and_epochs_come_from_the_histogram_without_reading_the_data(
    prepared, prepared_tokenizer, invented
):
    lengths = pair_lengths(*invented["train"], prepared_tokenizer)
    kept = lengths[lengths <= MAX_LENGTH]
    from_histogram = prepared_length_counts(prepared, "train")
    assert fitted_bucket_boundaries(from_histogram, 4, MAX_LENGTH) == fitted_bucket_boundaries(
        length_counts(kept), 4, MAX_LENGTH
    )
    assert full_batches_per_pass(from_histogram, 512, MAX_LENGTH) == full_batches_per_pass(
        length_counts(kept), 512, MAX_LENGTH
    )
    shorter = prepared_length_counts(prepared, "train", max_length=20)
    rows = pair_rows(prepared_dataset(prepared, "train", BatchingSettings(512, 20)))
    assert shorter.size <= 21 and rows.total() == shorter.sum()


def test_the_reader_holds_one_count_a_length_not_one_a_pair(prepared, tmp_path):
    """Three times the pairs, in the same vocabulary: the counts triple, their array does not
    grow, and the batches the trainer sizes its epoch and buckets from are the same pairs."""
    tripled = write_pairs(tmp_path, "train", TRAIN * 3)
    larger = tmp_path / "tripled"
    prepare(
        larger,
        TextPairs({"train": tripled}, ("xx", "yy")),
        subwords=prepared / "subwords.model",
        **OPTIONS,
    )
    counts = prepared_length_counts(prepared)
    assert np.array_equal(prepared_length_counts(larger), 3 * counts)
    assert counts.size <= MAX_LENGTH + 1
    rows = pair_rows(prepared_dataset(larger, "train", BatchingSettings(512, MAX_LENGTH)))
    assert rows == collections.Counter(
        {
            row: 3 * n
            for row, n in pair_rows(
                prepared_dataset(prepared, "train", BatchingSettings(512, MAX_LENGTH))
            ).items()
        }
    )


def test_two_input_pipelines_see_each_kept_pair_once(prepared):
    def share(index):
        return pair_rows(
            prepared_dataset(
                prepared,
                "train",
                BatchingSettings(512, MAX_LENGTH),
                num_shards=2,
                shard_index=index,
            )
        )

    first, second = share(0), share(1)
    assert abs(first.total() - second.total()) <= 1  # equal shares, by pairs, not by files
    settings = BatchingSettings(512, MAX_LENGTH)
    assert first + second == pair_rows(prepared_dataset(prepared, "train", settings))
    pipelines = read_manifest(prepared)["splits"]["train"]["pairs_kept"] + 1
    with pytest.raises(CorpusError, match=f"fewer than the {pipelines} input pipelines"):
        prepared_dataset(prepared, "train", settings, num_shards=pipelines, shard_index=0)


def test_shuffled_batches_repeat_with_a_seed_and_keep_every_pair(prepared):
    def batches(seed):
        dataset = prepared_dataset(
            prepared, "train", BatchingSettings(512, MAX_LENGTH, shuffle=True, seed=seed)
        )
        return [batch[1].tolist() for batch in dataset.as_numpy_iterator()]

    assert batches(3) == batches(3)
    shuffled = prepared_dataset(
        prepared, "train", BatchingSettings(512, MAX_LENGTH, shuffle=True, seed=3)
    )
    assert pair_rows(shuffled) == pair_rows(
        prepared_dataset(prepared, "train", BatchingSettings(512, MAX_LENGTH))
    )


def test_fitted_buckets_and_padded_batches_give_fixed_shapes(prepared):
    boundaries = fitted_bucket_boundaries(prepared_length_counts(prepared), 3, MAX_LENGTH)
    dataset = prepared_dataset(
        prepared,
        "validation",
        BatchingSettings(512, MAX_LENGTH, boundaries=boundaries, pad_batches=True),
    )
    shapes = {batch[1].shape for batch in dataset.as_numpy_iterator()}
    assert {width for _, width in shapes} <= {boundary - 1 for boundary in boundaries}
    assert all(rows == 512 // width for rows, width in shapes)


def test_an_unknown_split_is_named(prepared):
    with pytest.raises(CorpusError, match="no split 'dev'.*'test', 'train', 'validation'"):
        prepared_dataset(prepared, "dev", BatchingSettings(512, MAX_LENGTH))


# Reruns.


def test_a_rerun_with_the_same_inputs_is_a_no_op(prepared, invented, tmp_path, caplog):
    before = modification_times(prepared)
    manifest = json.loads((prepared / "manifest.json").read_text())
    moved = {  # the same contents elsewhere: inputs are known by their checksums
        split: tuple(shutil.copy(path, tmp_path) for path in paths)
        for split, paths in invented.items()
    }
    with caplog.at_level(logging.INFO):
        again = prepare(prepared, TextPairs(moved, ("xx", "yy")), **OPTIONS)
    assert again == manifest
    assert modification_times(prepared) == before
    assert "already: nothing to do" in caplog.text


def test_other_options_or_inputs_into_a_prepared_directory_are_refused(
    prepared, invented, tmp_path
):
    before = modification_times(prepared)
    corpus = TextPairs(invented, ("xx", "yy"))
    with pytest.raises(CorpusError, match=r"other inputs or options \(options.max_length: 48 then"):
        prepare(prepared, corpus, **{**OPTIONS, "max_length": 40})
    changed = dict(invented, test=write_pairs(tmp_path, "test", TEST[:-1], (".gz", ".gz")))
    with pytest.raises(CorpusError, match=r"corpus.inputs.test.source.bytes"):
        prepare(prepared, TextPairs(changed, ("xx", "yy")), **OPTIONS)
    assert modification_times(prepared) == before


def test_a_directory_that_is_not_prepared_is_not_written_into(tmp_path, invented):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "notes.txt").write_text("mine")
    with pytest.raises(CorpusError, match="out exists and is not a prepared directory"):
        prepare(tmp_path / "out", TextPairs(invented), **OPTIONS)


# Failures leave nothing that looks complete.


def failing_after(calls):
    serialize = prepare_module._serialized_pair
    count = iter(range(calls))

    def fail(source, target):
        if next(count, None) is None:
            raise RuntimeError("killed while writing")
        return serialize(source, target)

    return fail


def test_a_failed_or_killed_prepare_leaves_nothing_that_looks_prepared(
    tmp_path, invented, monkeypatch, caplog
):
    output, partial = tmp_path / "out", tmp_path / "out.partial"
    corpus = TextPairs(invented)
    monkeypatch.setattr(prepare_module, "_serialized_pair", failing_after(100))
    with pytest.raises(RuntimeError, match="killed while writing"):
        prepare(output, corpus, **OPTIONS)
    assert not output.exists() and not partial.exists()

    # Killed: nothing cleans up after it.
    monkeypatch.setattr(prepare_module, "_serialized_pair", failing_after(100))
    monkeypatch.setattr(prepare_module, "_discard", lambda partial: None)
    with pytest.raises(RuntimeError):
        prepare(output, corpus, **OPTIONS)
    assert not output.exists() and any(partial.glob("train-*.tfrecord"))
    assert not list(tmp_path.rglob("manifest.json"))
    with pytest.raises(CorpusError, match="holds no manifest.json"):
        read_manifest(partial)

    monkeypatch.undo()
    with caplog.at_level(logging.WARNING):
        manifest = prepare(output, corpus, **OPTIONS)
    assert "left by a prepare that did not finish" in caplog.text
    assert not partial.exists() and read_manifest(output) == manifest


# Bad input: a CorpusError naming file, line and value; nothing written.


def bad_text(tmp_path, source: bytes, target: bytes, suffix=""):
    paths = tmp_path / f"a.xx{suffix}", tmp_path / "a.yy"
    paths[0].write_bytes(gzip.compress(source) if suffix else source)
    paths[1].write_bytes(target)
    return TextPairs({"train": paths})


def truncated_gzip(tmp_path):
    packed = gzip.compress(b"".join(b"line %d\n" % i for i in range(5000)))
    path = tmp_path / "b.xx.gz"
    path.write_bytes(packed[: len(packed) // 2])
    return TextPairs({"train": (path, path)})


BAD_INPUTS = {
    "line counts": (
        lambda p: bad_text(p, b"one\ntwo\nthree\n", b"eins\nzwei\n"),
        r"line counts differ: \S+a\.xx has 3 lines, \S+a\.yy has 2",
    ),
    "empty file": (lambda p: bad_text(p, b"", b""), r"a\.xx is empty"),
    "blank lines only": (lambda p: bad_text(p, b"\n \n", b"x\ny\n"), r"a\.xx is empty"),
    "not UTF-8": (
        lambda p: bad_text(p, b"fine\nalso fine\nbroken \xff here\n", b"a\nb\nc\n", ".gz"),
        r"a\.xx\.gz, line 3: invalid UTF-8 b'\\xff' at byte 7",
    ),
    "corrupt gzip": (truncated_gzip, r"b\.xx\.gz, after line \d+: unreadable"),
    "missing file": (
        lambda p: TextPairs({"train": (p / "none.xx", p / "none.yy")}),
        r"corpus file not found: \S+none\.xx",
    ),
    "no tab": (
        lambda p: TsvPairs({"train": write_side(p / "p.tsv", ["α\tβ", "γ δ", "ε\tζ"])}),
        r"p\.tsv, line 2: a TSV line is source<TAB>target, this one has 0 tabs: 'γ δ'",
    ),
    "two tabs": (
        lambda p: TsvPairs({"train": write_side(p / "p.tsv", ["α\tβ\tγ"])}),
        r"p\.tsv, line 1: .* has 2 tabs: 'α\\tβ\\tγ'",
    ),
    "validation line counts": (
        lambda p: TextPairs(
            {"train": (write_side(p / "t.xx", ["α"]), write_side(p / "t.yy", ["β"]))}
            | {"validation": (write_side(p / "v.xx", ["α", "β"]), write_side(p / "v.yy", ["β"]))}
        ),
        r"v\.xx has 2 lines, \S+v\.yy has 1",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_names_file_line_and_value_and_writes_nothing(tmp_path, case):
    make, message = BAD_INPUTS[case]
    corpus = make(tmp_path)
    with pytest.raises(CorpusError, match=message):
        prepare(tmp_path / "out", corpus, **OPTIONS)
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.partial").exists()


def test_a_corpus_whose_every_pair_is_too_long_is_an_error_not_a_hang(tmp_path):
    pairs = invented_pairs(0, seed=4, long_pairs=20)  # 60 words each
    corpus = TextPairs({"train": write_pairs(tmp_path, "long", pairs)})
    with pytest.raises(
        CorpusError,
        match=r"every one of the 20 train pairs was dropped: 0 with an empty side, 20 longer "
        r"than max_length 48 \(their lengths, EOS included, run from \d+ to \d+ subwords\)",
    ):
        prepare(tmp_path / "out", corpus, vocab_size=100, max_length=MAX_LENGTH)
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.partial").exists()


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({}, "give one training input"),
        ({"train": ("a", "b"), "tsv": "c"}, "give one training input"),
        ({"train": ("a", "b"), "validation": ["v"]}, r"\['validation'\] split\(s\) need two"),
        ({"tsv": "a", "test": ["x", "y"]}, r"\['test'\] split\(s\) of a TSV corpus need one"),
        ({"tfds_name": "d", "validation": ["v"]}, "come from its split names"),
        ({"tsv": "a", "splits": {"train": "t"}}, "need a TFDS dataset"),
        ({"tsv": "a", "languages": ("xx", None)}, "name both languages"),
        ({"dataset": "multi30k", "test": ["x", "y"]}, "test splits of multi30k are its own"),
        ({"tsv": "a", "data_dir": "d"}, "data directory goes with a dataset"),
    ],
)
def test_inconsistent_input_options_are_named(arguments, message):
    with pytest.raises(CorpusError, match=message):
        corpus_description(**arguments)


# TSV and TFDS input.


def test_a_tsv_corpus_prepares_as_the_same_pairs_in_text_files(prepared, invented, tmp_path):
    corpus = TsvPairs(
        {
            "train": write_tsv(tmp_path / "train.tsv", TRAIN),
            "validation": write_tsv(tmp_path / "valid.tsv.gz", VALIDATION),
        },
        ("xx", "yy"),
    )
    manifest = prepare(tmp_path / "tsv", corpus, **OPTIONS)
    text = read_manifest(prepared)
    assert manifest["corpus"]["kind"] == "tsv" and manifest["languages"] == text["languages"]
    for split in ("train", "validation"):
        for key in ("pairs_read", "pairs_kept", "dropped", "lengths"):
            assert manifest["splits"][split][key] == text["splits"][split][key]
        rows = pair_rows(
            prepared_dataset(tmp_path / "tsv", split, BatchingSettings(512, MAX_LENGTH))
        )
        assert rows == pair_rows(
            prepared_dataset(prepared, split, BatchingSettings(512, MAX_LENGTH))
        )


class InventedTranslation(tfds.core.GeneratorBasedBuilder):
    """A TFDS translation dataset built here, offline: yy (Hangul) is its source by its
    supervised keys, though xx comes first in its Translation feature."""

    VERSION = tfds.core.Version("1.0.0")

    def _info(self):
        return tfds.core.DatasetInfo(  # not `dataset_info_from_configs`: tests/ is no package
            builder=self,
            features=tfds.features.Translation(languages=("xx", "yy")),
            supervised_keys=("yy", "xx"),
        )

    def _split_generators(self, dl_manager):
        return {"train": self._generate_examples(TRAIN), "dev": self._generate_examples(TEST)}

    def _generate_examples(self, pairs):
        for index, (source, target) in enumerate(pairs):
            yield index, {"xx": source, "yy": target}


def test_a_tfds_dataset_prepares_its_supervised_direction(tmp_path):
    corpus = TfdsPairs(
        "invented_translation",
        data_dir=str(tmp_path / "tfds"),
        splits={"train": "train", "validation": "dev"},
    )
    manifest = prepare(tmp_path / "out", corpus, **OPTIONS)
    assert manifest["languages"] == {"source": "yy", "target": "xx"}
    assert manifest["corpus"]["name"] == "invented_translation"
    assert manifest["corpus"]["inputs"]  # the TFDS files, by checksum
    train = manifest["splits"]["train"]
    assert train["pairs_read"] == len(TRAIN)
    assert train["dropped"] == {"empty": EMPTY_PAIRS, "too_long": LONG_PAIRS}
    tokenizer = SubwordTokenizer(tmp_path / "out" / "subwords.model")
    decoded = collections.Counter()
    for (source, _), target in prepared_dataset(
        tmp_path / "out", "train", BatchingSettings(512, MAX_LENGTH)
    ):
        sides = tokenizer.detokenize(source).numpy(), tokenizer.detokenize(target).numpy()
        decoded.update(zip(*sides, strict=True))
    flipped = collections.Counter((yy.encode(), xx.encode()) for xx, yy in TRAIN)
    assert decoded.total() == train["pairs_kept"] and not decoded - flipped
    assert manifest["splits"]["validation"]["pairs_read"] == len(TEST)
    assert prepare(tmp_path / "out", corpus, **OPTIONS) == manifest  # a no-op


@pytest.mark.parametrize(
    ("corpus", "message"),
    [
        (dict(name="no_such_dataset"), "TFDS dataset no_such_dataset could not be prepared"),
        (
            dict(name="invented_translation", splits={"train": "train", "test": "nope"}),
            r"has splits \['dev', 'train'\]; asked for \{'train': 'train', 'test': 'nope'\}",
        ),
        (
            dict(name="invented_translation", languages=("xx", "zz")),
            r"has no feature \['zz'\]; features: \['xx', 'yy'\]",
        ),
    ],
)
def test_a_tfds_dataset_it_cannot_read_is_named(tmp_path, corpus, message):
    with pytest.raises(CorpusError, match=message):
        prepare(tmp_path / "out", TfdsPairs(**corpus, data_dir=str(tmp_path / "tfds")), **OPTIONS)
    assert not (tmp_path / "out").exists()


# Other vocabularies, sampling and the vocabulary check.


@pytest.mark.parametrize(("kind", "lowercase"), [("unigram", True), ("wordpiece", False)])
def test_other_vocabularies_learned_on_a_sample(tmp_path, invented, kind, lowercase, caplog):
    files = {split: invented[split] for split in ("train", "validation")}
    options = {**OPTIONS, "vocab_size": 150, "sample_sentences": 300}
    with caplog.at_level(logging.INFO):
        manifest = prepare(tmp_path / "out", TextPairs(files), kind, lowercase=lowercase, **options)
    vocabulary = manifest["vocabulary"]
    assert vocabulary["kind"] == kind and vocabulary["lowercase"] == lowercase
    assert vocabulary["sampled"] and vocabulary["sentences"] <= 300
    assert "on a random sample of 150 of 327 training pairs" in caplog.text
    tokenizer = SubwordTokenizer(tmp_path / "out" / vocabulary["file"])
    assert tokenizer.lowercase == lowercase
    for split in files:
        rows = pair_rows(
            prepared_dataset(tmp_path / "out", split, BatchingSettings(512, MAX_LENGTH))
        )
        assert rows == trainer_rows(files[split], tokenizer)


def test_a_vocabulary_too_large_for_its_text_is_named(tmp_path, invented):
    with pytest.raises(CorpusError, match="unigram vocabulary of 400 failed: .*too high"):
        prepare(tmp_path / "out", TextPairs(invented), "unigram", vocab_size=400)
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.partial").exists()


def test_a_run_with_another_vocabulary_is_refused(prepared, invented, tmp_path):
    check_vocabulary(prepared, shutil.copy(prepared / "subwords.model", tmp_path / "mine"))
    other = train_sentencepiece(invented["validation"], tmp_path / "other.model", 100)
    with pytest.raises(CorpusError, match=r"other\.model is not the vocabulary .* prepared with"):
        check_vocabulary(prepared, other)


def test_a_given_vocabulary_is_adopted_as_it_is(prepared, prepared_tokenizer, invented, tmp_path):
    """`subwords`: a teacher's vocabulary for the text it distilled, which its student resumes
    on: the shards hold its ids (none learned from this text), and it is an input of the rerun."""
    given = shutil.copy(prepared / "subwords.model", tmp_path / "teacher.model")
    files = {"train": invented["validation"], "test": invented["test"]}  # not what it learned
    output = tmp_path / "distilled"
    manifest = prepare(output, TextPairs(files, ("xx", "yy")), subwords=given, **OPTIONS)
    check_vocabulary(output, given)  # byte for byte: what a resuming student's run holds
    assert manifest["options"]["subwords"]["sha256"] == manifest["vocabulary"]["sha256"]
    assert manifest["vocabulary"]["entries"] == prepared_tokenizer.vocab_size
    for split in files:
        rows = pair_rows(prepared_dataset(output, split, BatchingSettings(512, MAX_LENGTH)))
        assert rows == trainer_rows(files[split], prepared_tokenizer)
    before = modification_times(output)
    prepare(output, TextPairs(files, ("xx", "yy")), subwords=given, **OPTIONS)  # a no-op
    assert modification_times(output) == before
    other = train_sentencepiece(invented["validation"], tmp_path / "other.model", 100)
    with pytest.raises(CorpusError, match=r"other inputs .*options.subwords.sha256"):
        prepare(output, TextPairs(files, ("xx", "yy")), subwords=other, **OPTIONS)
    with pytest.raises(CorpusError, match=r"prepared from other inputs or options"):
        prepare(output, TextPairs(files, ("xx", "yy")), **OPTIONS)  # one learned anew


@pytest.mark.parametrize(
    ("given", "options", "message"),
    [
        ("missing.model", {}, r"vocabulary file not found: .*missing\.model"),
        ("notes.txt", {}, r"the given vocabulary .*notes\.txt: .* is not a SentencePiece model"),
        ("teacher.model", {"lowercase": True}, r"teacher\.model is not a lowercasing model"),
        ("teacher.model", {"vocabulary": "unigram"}, r"is a bpe model, where .* needs unigram"),
    ],
)
def test_a_given_vocabulary_that_cannot_be_used_is_named(
    prepared, invented, tmp_path, given, options, message
):
    shutil.copy(prepared / "subwords.model", tmp_path / "teacher.model")
    (tmp_path / "notes.txt").write_text("not a model\n")
    with pytest.raises(CorpusError, match=message):
        prepare(
            tmp_path / "out", TextPairs(invented), subwords=tmp_path / given, **OPTIONS, **options
        )
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.partial").exists()


# A damaged prepared directory is named.


@pytest.mark.parametrize("damage", ["missing", "truncated", "changed"])
def test_a_missing_truncated_or_changed_shard_is_named(prepared, tmp_path, damage):
    copy = shutil.copytree(prepared, tmp_path / "copy")
    shard = copy / "train-00003-of-00006.tfrecord"
    size = shard.stat().st_size
    if damage == "missing":
        shard.unlink()
        message = r"train-00003-of-00006\.tfrecord is missing"
    elif damage == "truncated":
        shard.write_bytes(shard.read_bytes()[:100])
        message = rf"train-00003-of-00006\.tfrecord holds 100 bytes where .* records {size}"
    else:
        shard.write_bytes(bytes(size))
        message = r"train-00003-of-00006\.tfrecord differs from the manifest's sha256"
    with pytest.raises(CorpusError, match=message):
        read_manifest(copy, verify_checksums=damage == "changed")
    if damage != "changed":  # reading checks sizes, and any split's reader names the shard
        with pytest.raises(CorpusError, match=message):
            prepared_dataset(copy, "validation", BatchingSettings(512, MAX_LENGTH))


# The command line.


def test_prepare_on_the_command_line(tmp_path, invented, capsys):
    (train_xx, train_yy), (valid_xx, valid_yy) = invented["train"], invented["validation"]
    arguments = [
        "prepare",
        *("--train", str(train_xx), str(train_yy)),
        *("--validation", str(valid_xx), str(valid_yy)),
        *("--src-lang", "xx", "--tgt-lang", "yy", "--output", str(tmp_path / "out")),
        *("--vocab-size", str(VOCAB_SIZE), "--max-length", str(MAX_LENGTH)),
        *("--shard-pairs", "100"),
    ]
    assert cli.main(arguments) == 0
    printed = capsys.readouterr().out
    kept = read_manifest(tmp_path / "out")["splits"]["train"]["pairs_kept"]
    assert f"train: {kept} of 327 pairs kept ({EMPTY_PAIRS} empty, {LONG_PAIRS} longer than" in (
        printed
    )
    assert "4 shard(s)" in printed and "vocabulary: bpe, 200 entries" in printed
    assert cli.main(arguments) == 0 and capsys.readouterr().out == printed  # a no-op

    with pytest.raises(SystemExit, match="prepare: error: .*need two files"):
        cli.main([*arguments[:4], "--validation", str(valid_xx), "--output", str(tmp_path / "x")])


def test_prepare_a_tfds_dataset_on_the_command_line(tmp_path, capsys):
    arguments = [
        "prepare",
        *("--tfds", "invented_translation", "--tfds-data-dir", str(tmp_path / "tfds")),
        *("--splits", "train=train,test=dev", "--src-lang", "xx", "--tgt-lang", "yy"),
        *("--output", str(tmp_path / "out"), "--vocab-size", "150", "--max-length", "64"),
    ]
    assert cli.main(arguments) == 0
    manifest = read_manifest(tmp_path / "out")
    assert manifest["languages"] == {"source": "xx", "target": "yy"}
    assert sorted(manifest["splits"]) == ["test", "train"]
    assert "test: 40 of 40 pairs kept" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        cli.main([*arguments[:5], "--splits", "train", "--output", str(tmp_path / "x")])
    assert "'train' is not SPLIT=TFDS_SPLIT" in capsys.readouterr().err


def test_a_dataset_the_trainer_names_prepares_with_its_splits(tmp_path, multi30k_dir, capsys):
    """`prepare --dataset multi30k` (what `make demo` runs): Multi30k's three splits, its
    language pair by default."""
    data_dir = tmp_path / "multi30k"
    data_dir.mkdir()
    for path in multi30k_dir.glob("*.[ed][ne].gz"):  # the first lines of each EN and DE file
        with gzip.open(path, "rt", encoding="utf-8") as whole:
            lines = [line for _, line in zip(range(200), whole, strict=False)]
        with gzip.open(data_dir / path.name, "wt", encoding="utf-8") as part:
            part.writelines(lines)
    arguments = ["prepare", "--dataset", "multi30k", "--data-dir", str(data_dir)]
    output = ["--output", str(tmp_path / "out"), "--vocab-size", "300"]
    assert cli.main([*arguments, *output]) == 0
    manifest = read_manifest(tmp_path / "out")
    assert manifest["languages"] == {"source": "en", "target": "de"}
    assert {name: split["pairs_read"] for name, split in manifest["splits"].items()} == {
        "train": 200,
        "validation": 200,
        "test_2016_flickr": 200,
    }
    assert manifest["corpus"]["inputs"]["train.source"]["path"] == str(data_dir / "train.en.gz")
