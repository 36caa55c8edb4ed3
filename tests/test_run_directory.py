"""A run directory holds one run: a rerun resumes it only on the same data (and files); options
and counts out of range are refused before anything is written or run; one trainer at a time; a
failed write replaces nothing."""

import errno
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from durable_files import WriteError
from keras_transformer.analysis.evaluation import task
from keras_transformer.cli import build_parser, commands, main
from keras_transformer.config import ConfigError, TransformerConfig
from keras_transformer.run_directory import (
    check_same_data_files,
    prepare,
    read_settings,
    trainer_lock,
)
from keras_transformer.training.trainer import TrainingRun
from repo_paths import REPO_ROOT

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
        ({"target_language": "fr"}, r"target_language='de'.*'fr': target_language='de' resumes it"),
        ({"source_language": "de", "target_language": "en"}, r"source_language='en' resumes it"),
        ({"dataset": "ptb"}, r"dataset='multi30k'.*dataset='multi30k' resumes it"),
        ({"lowercase": True}, r"lowercase=False.*True: lowercase=False resumes it"),
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
        ("log_every", 0, "log_every 0 must be positive"),
        ("keep_checkpoints", 0, "keep_checkpoints 0 must be positive"),
        ("accumulate", 0, "accumulate 0 must be positive"),
        ("max_minutes", -1.0, "max_minutes -1.0 must be positive"),
        ("bleu_every", -5, "bleu_every -5 must be positive, or 0 for never"),
    ],
)
def test_an_option_out_of_range_is_named_before_anything_is_written(tmp_path, option, value, flag):
    with pytest.raises(ConfigError, match=flag):
        make_run(tmp_path, **{option: value})
    assert not (tmp_path / "run").exists()
    make_run(tmp_path, bleu_every=0, checkpoint_every=0)  # 0: never


def test_a_count_out_of_range_is_refused_by_the_parser(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["average", "run", "--last", "0"])
    assert "is below" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["evaluate", "--model", "run", "--beam", "0"], "beam_size 0 must be an integer of at"),
        (["translate", "--model", "run", "--extra-length", "-1"], "extra_length -1 must be"),
        (["export", "--model", "run", "--output", "out", "--beam", "-2"], "beam_size -2 must"),
    ],
)
def test_a_search_setting_out_of_range_is_refused_by_its_name(argv, message):
    with pytest.raises(ConfigError, match=message):
        commands.searched(task("multi30k", "de"), build_parser().parse_args(argv))


@pytest.mark.parametrize(
    "data, error",
    [
        (["--data-dir", "none"], "Multi30k files missing: ['none/train.en.gz'"),
        (["--dataset", "wmt14"], "dataset wmt14 needs a data_dir"),
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
    assert "max_minutes under MultiWorkerMirroredStrategy" in str(stop.value)
    assert "bound the run with max_steps" in str(stop.value)
    assert not (tmp_path / "run").exists()


# -- faults: changed data, a second trainer, a failed write ----------------------------------


def trained_on(tmp_path, data_files, **options):
    """`check_same_data_files` of a run that has trained (it holds a backup)."""
    run = make_run(tmp_path, **options)
    prepare(run, CONFIG)
    (run.output / "backup").mkdir(exist_ok=True)
    check_same_data_files(run, data_files)
    return run


def test_a_resume_on_other_training_files_is_refused_unless_allowed(tmp_path):
    run = trained_on(tmp_path, {"train.en.gz": "aa", "train.de.gz": "bb"})
    saved = (run.output / "run.json").read_text()
    trained_on(tmp_path, {"train.en.gz": "aa", "train.de.gz": "bb"})  # the same data: resumes

    with pytest.raises(ConfigError, match=r"run.json was trained on other data.*'bb'.*'cc'"):
        trained_on(tmp_path, {"train.en.gz": "aa", "train.de.gz": "cc"})
    assert (run.output / "run.json").read_text() == saved

    trained_on(tmp_path, {"train.en.gz": "aa", "train.de.gz": "cc"}, allow_training_changes=True)
    settings = read_settings(run.output)
    assert settings["data_files"] == {"train.en.gz": "aa", "train.de.gz": "cc"}
    [change] = settings["training_changes"]
    assert change["data_files"] == [
        {"train.en.gz": "aa", "train.de.gz": "bb"},
        {"train.en.gz": "aa", "train.de.gz": "cc"},
    ]


def test_a_lower_learning_rate_is_a_training_change_recorded_on_resume(tmp_path):
    make_trained(tmp_path)
    with pytest.raises(ConfigError, match="set allow_training_changes"):
        prepare(make_run(tmp_path), CONFIG.replace(learning_rate_scale=0.5))
    prepare(
        make_run(tmp_path, allow_training_changes=True), CONFIG.replace(learning_rate_scale=0.5)
    )
    [change] = read_settings(tmp_path / "run")["training_changes"]
    assert change["learning_rate_scale"] == [1.0, 0.5]


HOLD_THE_LOCK = """
import sys, time
from keras_transformer.run_directory import trainer_lock
with trainer_lock(sys.argv[1]):
    print("held", flush=True)
    time.sleep(600)
"""


def test_a_second_trainer_of_a_run_directory_is_refused_naming_the_first(tmp_path):
    output = tmp_path / "run"
    first = subprocess.Popen(
        [sys.executable, "-c", HOLD_THE_LOCK, str(output)],
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)),
    )
    try:
        assert first.stdout.readline() == "held\n"
        with pytest.raises(SystemExit) as refused:
            main(["train", "--preset", "tiny", "--output", str(output), "--data-dir", "none"])
    finally:
        first.kill()
        first.wait()
    message = str(refused.value)
    assert "\n" not in message
    assert f"is being trained by process {first.pid} on host {socket.gethostname()}" in message
    assert not (output / "config.json").exists()  # refused before anything was written
    with trainer_lock(output):  # the first one's end released it
        pass


@pytest.mark.parametrize(
    "number, name", [(errno.ENOSPC, "ENOSPC"), (errno.EFBIG, "EFBIG"), (errno.EIO, "EIO")]
)
def test_a_failed_write_is_one_clear_error_and_replaces_nothing(
    tmp_path, monkeypatch, number, name
):
    prepare(make_run(tmp_path, max_steps=3), CONFIG)
    config_json = tmp_path / "run" / "config.json"
    before = sorted(p.name for p in config_json.parent.iterdir()), config_json.read_text()
    write_text = Path.write_text

    def fails_half_way(path, text, *args, **kwargs):
        write_text(path, text[: len(text) // 2], *args, **kwargs)
        raise OSError(number, os.strerror(number))

    monkeypatch.setattr(Path, "write_text", fails_half_way)
    with pytest.raises(WriteError) as failed:
        prepare(make_run(tmp_path, max_steps=9), CONFIG.replace(d_ff=64))
    monkeypatch.undo()
    assert str(failed.value).startswith(f"cannot write {config_json}: {os.strerror(number)}")
    assert f"({name})" in str(failed.value)
    assert (sorted(p.name for p in config_json.parent.iterdir()), config_json.read_text()) == before
    assert TransformerConfig.from_file(config_json) == CONFIG
