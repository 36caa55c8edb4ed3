"""Sequence-level knowledge distillation: the training pairs, then the teacher's translations."""

import json

import pytest

from keras_transformer import cli
from keras_transformer.decoding.translator import load_run
from keras_transformer.training.distillation import mirrored_paths
from pipelines import corpus_files
from pipelines.corpus import CorpusError, read_lines

EXTRA = 6  # short outputs keep an untrained teacher quick


@pytest.mark.parametrize("translations_only", [False, True])
def test_distill_writes_the_training_pairs_then_their_translations(
    run_dir, first_lines_data, tmp_path, translations_only
):
    output = tmp_path / "distilled"
    arguments = ["--model", str(run_dir), "--data-dir", str(first_lines_data)]
    arguments += ["--beam", "2", "--extra-length", str(EXTRA)]
    arguments += ["--translations-only"] if translations_only else []
    cli.main(["distill", *arguments, "--output", str(output)])

    english, german = (read_lines(first_lines_data / f"train.{lang}.gz") for lang in ("en", "de"))
    teacher = load_run(run_dir).translate(english, 2, extra_length=EXTRA)
    kept = ([], []) if translations_only else (english, german)
    assert read_lines(output / "train.en.gz") == kept[0] + english
    assert read_lines(output / "train.de.gz") == kept[1] + teacher
    # The other splits are the originals, so validation and test still score the references.
    distilled, original = (
        corpus_files("multi30k", d, "en", "de") for d in (output, first_lines_data)
    )
    for split in ("validation", "test_2016_flickr"):
        for path, its_original in zip(distilled[split], original[split], strict=True):
            assert path.resolve() == its_original.resolve()
    record = json.loads((output / "distillation.json").read_text())
    assert record["training_pairs"] == 4 and record["search"]["beam_size"] == 2
    assert record["with_references"] is not translations_only
    assert record["teachers"] == [str(run_dir / "model.weights.h5")]


def test_distill_refuses_to_write_over_the_original_data(run_dir, first_lines_data):
    arguments = ["--model", str(run_dir), "--data-dir", str(first_lines_data)]
    with pytest.raises(SystemExit, match="holds the original data: name a new directory"):
        cli.main(["distill", *arguments, "--output", str(first_lines_data)])
    assert len(read_lines(first_lines_data / "train.de.gz")) == 4


def test_the_copy_mirrors_the_data_directory_and_refuses_files_read_from_elsewhere(tmp_path):
    data = tmp_path / "data"
    nested = {"train": (data / "wmt14_text/de-en/train.en", data / "wmt14_text/de-en/train.de")}
    copy = mirrored_paths(nested, data, tmp_path / "copy")
    assert copy["train"] == tuple(
        tmp_path / "copy/wmt14_text/de-en" / p.name for p in nested["train"]
    )
    cached = {"train": (tmp_path / "cache/train.words", tmp_path / "cache/train.tree")}
    with pytest.raises(CorpusError, match="not a file of .*data: this dataset is not read from"):
        mirrored_paths(cached, data, tmp_path / "copy")
