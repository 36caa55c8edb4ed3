"""A run directory holds one run: a rerun resumes it only on the same data; options and counts
out of range are refused before anything is written or run."""

import json

import pytest

from keras_transformer.cli import build_parser, main
from keras_transformer.config import ConfigError, TransformerConfig
from keras_transformer.run_directory import prepare
from keras_transformer.training.trainer import TrainingRun

CONFIG = TransformerConfig.preset("tiny")


def make_run(tmp_path, **options):
    return TrainingRun(output=tmp_path / "run", data_dir=tmp_path / "data", **options)


def make_trained(tmp_path):
    """A run directory that has learned something: its vocabulary."""
    prepare(make_run(tmp_path), CONFIG)
    (tmp_path / "run" / "subwords.model").write_bytes(b"a vocabulary")


def test_a_rerun_on_the_same_data_resumes(tmp_path):
    prepare(make_run(tmp_path, max_steps=3), CONFIG)
    prepare(make_run(tmp_path, max_steps=9), CONFIG)
    assert json.loads((tmp_path / "run" / "run.json").read_text())["max_steps"] == 9


@pytest.mark.parametrize(
    "changed, message",
    [
        ({"target_language": "fr"}, r"target_language='de'.*'fr': --tgt de resumes it"),
        ({"source_language": "de", "target_language": "en"}, r"source_language='en'.*--src en"),
        ({"dataset": "ptb"}, r"dataset='multi30k'.*--dataset multi30k"),
        ({"lowercase": True}, r"lowercase=False.*True: drop --lowercase"),
    ],
)
def test_a_rerun_on_other_data_is_refused_and_changes_nothing(tmp_path, changed, message):
    make_trained(tmp_path)
    saved = (tmp_path / "run" / "run.json").read_text()

    with pytest.raises(ConfigError, match=message):
        prepare(make_run(tmp_path, **changed), CONFIG)
    assert (tmp_path / "run" / "run.json").read_text() == saved


def test_a_resume_without_subwords_keeps_where_the_adopted_vocabulary_came_from(tmp_path):
    teacher = tmp_path / "teacher.model"
    prepare(make_run(tmp_path, subwords=teacher), CONFIG)
    (tmp_path / "run" / "subwords.model").write_bytes(b"the teacher's vocabulary")
    prepare(make_run(tmp_path, max_steps=9), CONFIG)
    saved = json.loads((tmp_path / "run" / "run.json").read_text())
    assert saved["subwords"] == str(teacher) and saved["max_steps"] == 9


def test_a_run_that_failed_before_learning_anything_starts_again_as_corrected(tmp_path):
    prepare(make_run(tmp_path, target_language="cs"), CONFIG)  # e.g. no such data
    prepare(make_run(tmp_path), CONFIG.replace(d_ff=64))
    saved = json.loads((tmp_path / "run" / "run.json").read_text())
    assert saved["target_language"] == "de" and saved["training_changes"] == []
    assert json.loads((tmp_path / "run" / "config.json").read_text())["d_ff"] == 64


def test_a_corrupt_run_json_is_named_and_left_as_it_is(tmp_path):
    make_trained(tmp_path)
    run_json = tmp_path / "run" / "run.json"
    run_json.write_text('{"dataset": "multi30k", "targ')
    with pytest.raises(ConfigError, match=r"run\.json is not valid JSON"):
        prepare(make_run(tmp_path), CONFIG)
    assert run_json.read_text() == '{"dataset": "multi30k", "targ'


@pytest.mark.parametrize(
    "option, value, flag",
    [
        ("log_every", 0, "--log-every 0 must be positive"),
        ("keep_checkpoints", 0, "--keep-checkpoints 0 must be positive"),
        ("accumulate", 0, "--accumulate 0 must be positive"),
        ("max_minutes", -1.0, "--max-minutes -1.0 must be positive"),
        ("bleu_every", -5, "--bleu-every -5 must be positive, or 0 for never"),
    ],
)
def test_an_option_out_of_range_is_named_before_anything_is_written(tmp_path, option, value, flag):
    with pytest.raises(ConfigError, match=flag):
        make_run(tmp_path, **{option: value})
    assert not (tmp_path / "run").exists()
    make_run(tmp_path, bleu_every=0, checkpoint_every=0)  # 0: never


@pytest.mark.parametrize(
    "argv",
    [
        ["average", "run", "--last", "0"],
        ["evaluate", "--model", "run", "--beam", "0"],
        ["translate", "--model", "run", "--extra-length", "-1"],
        ["export", "--model", "run", "--output", "out", "--beam", "-2"],
    ],
)
def test_a_count_out_of_range_is_refused_by_the_parser(argv, capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(argv)
    assert "is below" in capsys.readouterr().err


@pytest.mark.parametrize(
    "data, error",
    [
        (["--data-dir", "none"], "Multi30k files missing: ['none/train.en.gz'"),
        (["--dataset", "wmt14"], "--dataset wmt14 needs --data-dir"),
    ],
)
def test_the_command_line_reports_a_user_error_in_one_line(tmp_path, monkeypatch, data, error):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stop:
        main(["train", "--preset", "tiny", *data, "--output", "run"])
    assert str(stop.value).startswith(f"keras-transformer train: error: {error}")


def test_a_batch_share_below_one_sentence_is_refused(tmp_path, multi30k_dir):
    argv = ["train", "--preset", "tiny", "--data-dir", str(multi30k_dir), "--batch-tokens", "128"]
    with pytest.raises(SystemExit) as stop:
        main([*argv, "--accumulate", "4", "--output", str(tmp_path / "run")])
    assert "leaves 32 tokens a batch, less than one sentence of max_length 64" in str(stop.value)


def test_a_wall_clock_budget_across_workers_is_refused_before_anything_is_written(
    tmp_path, monkeypatch, multi30k_dir
):
    # Each worker would stop by its own clock, and one left in a step would wait for ever.
    workers = {"worker": ["127.0.0.1:20001", "127.0.0.1:20002"]}
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": workers, "task": {"type": "worker"}}))
    argv = ["train", "--preset", "tiny", "--data-dir", str(multi30k_dir), "--max-minutes", "5"]
    with pytest.raises(SystemExit) as stop:
        main([*argv, "--output", str(tmp_path / "run")])
    assert "--max-minutes under MultiWorkerMirroredStrategy" in str(stop.value)
    assert "--max-steps" in str(stop.value)
    assert not (tmp_path / "run").exists()
