"""Multi30k and the Penn Treebank sample as TFDS builders from local files; the WMT14 path names
the right builder."""

import pytest
import tensorflow_datasets as tfds

from pipelines import Multi30k, PennTreebankSample
from pipelines.ptb import linearize
from pipelines.wmt14 import wmt14_builder


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
