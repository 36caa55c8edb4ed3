"""Sequence-level knowledge distillation: the training pairs, then the teacher's translations."""

import gzip
import json
import shutil

import pytest

from keras_transformer import cli
from keras_transformer.decoding.translator import load_run
from keras_transformer.search_settings import SearchSettings
from keras_transformer.training.distillation import mirrored_paths
from pipelines import corpus_files
from pipelines.corpus import CorpusError, read_lines
from pipelines.prepared import check_vocabulary, read_manifest

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
    teacher = load_run(run_dir).translate(english, SearchSettings(2, extra_length=EXTRA))
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


def prepare_multi30k(data_dir, output, subwords):
    arguments = ["prepare", "--dataset", "multi30k", "--data-dir", str(data_dir)]
    assert cli.main([*arguments, "--subwords", str(subwords), "--output", str(output)]) == 0


def test_a_teacher_on_prepared_data_distills_the_text_it_was_prepared_from(
    run_dir, first_lines_data, tmp_path
):
    """`make train-multi30k-ensemble`'s chain: teachers trained with `train --data` translate
    the Multi30k text their corpus was prepared from, and the copy, prepared with their
    vocabulary, holds the ids that a student resuming their weights reads."""
    teacher = shutil.copytree(run_dir, tmp_path / "teacher")
    prepare_multi30k(first_lines_data, tmp_path / "prepared", teacher / "subwords.model")
    settings = {"dataset": "prepared", "data_dir": str(tmp_path / "prepared")}
    (teacher / "run.json").write_text(
        json.dumps({**settings, "source_language": "en", "target_language": "de"})
    )
    output = tmp_path / "distilled"
    search = ["--beam", "2", "--extra-length", str(EXTRA)]
    cli.main(["distill", "--model", str(teacher), *search, "--output", str(output)])

    english, german = (read_lines(first_lines_data / f"train.{lang}.gz") for lang in ("en", "de"))
    assert read_lines(output / "train.en.gz") == english + english
    translations = load_run(teacher).translate(english, SearchSettings(2, extra_length=EXTRA))
    assert read_lines(output / "train.de.gz") == german + translations
    assert (output / "val.de.gz").resolve() == (first_lines_data / "val.de.gz").resolve()

    prepare_multi30k(output, tmp_path / "student-data", teacher / "subwords.model")
    check_vocabulary(tmp_path / "student-data", teacher / "subwords.model")
    splits = read_manifest(tmp_path / "student-data")["splits"]
    assert {name: split["pairs_read"] for name, split in splits.items()} == {
        "train": 8,
        "validation": 4,
        "test_2016_flickr": 4,
    }

    with gzip.open(first_lines_data / "train.de.gz", "wt", encoding="utf-8") as changed:
        changed.write("Ein anderer Satz.\n" * 4)
    with pytest.raises(SystemExit, match=r"train\.de\.gz, which .*prepared was prepared from, has"):
        cli.main(["distill", "--model", str(teacher), "--output", str(tmp_path / "again")])
    assert not (tmp_path / "again").exists()
