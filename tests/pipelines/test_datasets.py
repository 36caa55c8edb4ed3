"""Multi30k and the Penn Treebank sample as TFDS builders from local files; the WMT14 path names
the right builder and writes a prepared corpus as the trainer's aligned files."""

import types

import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from pipelines import CorpusError, Multi30k, PennTreebankSample, datasets, read_parallel_corpus
from pipelines.ptb import linearize
from pipelines.wmt14 import corpus_files, wmt14_builder


def test_multi30k_builds_offline_from_local_files(tmp_path, multi30k_dir):
    builder = Multi30k(config="en-fr", data_dir=str(tmp_path))
    builder.download_and_prepare(
        download_config=tfds.download.DownloadConfig(manual_dir=str(multi30k_dir))
    )
    assert builder.info.splits["train"].num_examples == 29000
    assert builder.info.splits["validation"].num_examples == 1014
    assert builder.info.splits["test_2016_flickr"].num_examples == 1000
    first = next(iter(tfds.as_numpy(builder.as_dataset(split="validation"))))
    assert set(first) == {"en", "fr"} and first["en"] and first["fr"]


class DownloadOnly:
    """A TFDS download manager without a manual directory, whose downloads are local copies."""

    def __init__(self, multi30k_dir):
        self.multi30k_dir, self.urls = multi30k_dir, {}

    @property
    def manual_dir(self):
        raise AssertionError("Manual directory does not exist or is empty.")  # as TFDS does

    def download(self, urls):
        self.urls.update(urls)
        return {name: self.multi30k_dir / name for name in urls}


def test_multi30k_downloads_what_no_manual_directory_holds(tmp_path, multi30k_dir):
    manager = DownloadOnly(multi30k_dir)
    splits = Multi30k(config="en-de", data_dir=str(tmp_path))._split_generators(manager)
    assert set(splits) == {"train", "validation", "test_2016_flickr"}
    assert manager.urls["val.de.gz"].endswith("/data/task1/raw/val.de.gz")
    _, first = next(iter(splits["validation"]))
    assert first["en"] and first["de"]


def test_without_the_data_beside_the_checkout_multi30k_is_downloaded_once(
    tmp_path, monkeypatch, multi30k_dir
):
    managers = []

    def download_manager(download_dir):
        managers.append(DownloadOnly(multi30k_dir))
        return managers[-1]

    monkeypatch.chdir(tmp_path)  # no ../shared/data/multi30k here
    monkeypatch.setenv("KT_DATA_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(tfds.download, "DownloadManager", download_manager)
    data_dir = datasets.default_data_dir("multi30k")
    assert data_dir == tmp_path / "home" / "multi30k"
    assert managers[0].urls["train.cs.gz"].endswith("/data/task1/raw/train.cs.gz")
    pairs = datasets.corpus_files("multi30k", data_dir, "en", "fr")
    corpus = read_parallel_corpus(*pairs["validation"])
    original = read_parallel_corpus(multi30k_dir / "val.en.gz", multi30k_dir / "val.fr.gz")
    assert corpus.target == original.target
    assert datasets.default_data_dir("multi30k") == data_dir and len(managers) == 1  # cached


def test_ptb_sample_builds_offline_from_the_zip(tmp_path, ptb_dir, ptb_splits):
    builder = PennTreebankSample(data_dir=str(tmp_path))
    builder.download_and_prepare(
        download_config=tfds.download.DownloadConfig(manual_dir=str(ptb_dir))
    )
    sizes = {split: info.num_examples for split, info in builder.info.splits.items()}
    assert sizes == {split: len(trees) for split, trees in ptb_splits.items()}
    pairs = {(" ".join(t.leaves()), linearize(t)) for t in ptb_splits["test"]}
    examples = tfds.as_numpy(builder.as_dataset(split="test"))
    assert {(e["words"].decode(), e["tree"].decode()) for e in examples} == pairs


def test_wmt14_builder_for_the_paper_pairs(tmp_path):
    assert wmt14_builder("en", "de", data_dir=str(tmp_path)).name == "wmt14_translate"
    assert wmt14_builder("en", "fr", data_dir=str(tmp_path)).builder_config.name == "fr-en"
    with pytest.raises(ValueError, match="no en-cs pair"):
        wmt14_builder("en", "cs")


class PreparedWmt14:
    """A stand-in for the prepared TFDS builder of de-en, which this machine cannot download."""

    builder_config = types.SimpleNamespace(name="de-en")

    def __init__(self, error=None):
        self.error, self.prepared = error, 0

    def download_and_prepare(self):
        self.prepared += 1
        if self.error:
            raise self.error

    def as_dataset(self, split):
        english = [f"{split} one.", "Two\nlines  in one."]
        german = [f"{split} eins.", "Zwei Zeilen in einer."]
        return tf.data.Dataset.from_tensor_slices({"en": english, "de": german})


def test_wmt14_splits_are_written_once_as_aligned_files(tmp_path):
    builder = PreparedWmt14()
    files = corpus_files(tmp_path, "en", "de", builder=builder)

    assert set(files) == {"train", "validation", "test"}
    assert files["test"] == (
        tmp_path / "wmt14_text/de-en/test.en",
        tmp_path / "wmt14_text/de-en/test.de",
    )
    corpus = read_parallel_corpus(*files["validation"])
    assert corpus.source == ["validation one.", "Two lines in one."]
    assert corpus.target == ["validation eins.", "Zwei Zeilen in einer."]
    assert corpus_files(tmp_path, "en", "de", builder=builder) == files
    assert builder.prepared == 1
    assert not list(tmp_path.rglob("*.partial"))


def test_wmt14_that_cannot_be_prepared_is_named_and_writes_nothing(tmp_path):
    builder = PreparedWmt14(error=ConnectionError("no route to host"))
    with pytest.raises(CorpusError, match="WMT14 de-en could not be prepared in .*no route"):
        corpus_files(tmp_path, "en", "de", builder=builder)
    assert not (tmp_path / "wmt14_text").exists()
