"""`keras-transformer train` end to end on a slice of real Multi30k: resume after kill -9,
reproducibility with a seed, and clear errors for corrupt state or a changed configuration."""

import json
import logging
import os
import signal
import subprocess
import sys
import time

import pytest

from keras_transformer import cli
from keras_transformer.run_directory import read_metrics
from repo_paths import REPO_ROOT

pytestmark = pytest.mark.slow  # trains in subprocesses

# One layer a stack: what these tests prove does not depend on depth, and each process traces
# its train and validation steps, whose graphs grow with it.
TINY = ["--preset", "tiny", "--set", "vocab_size=600", "--set", "num_layers=1"]
TINY += ["--batch-tokens", "512", "--bleu-every", "0"]


def train_arguments(data_dir, output, *extra):
    return ["train", *TINY, "--data-dir", str(data_dir), "--output", str(output), *extra]


def train_command(data_dir, output, *extra):
    return [sys.executable, "-m", "keras_transformer", *train_arguments(data_dir, output, *extra)]


def refusal(data_dir, output, *extra) -> str:
    """The error of a train command refused before it trains, run in this process: a process
    of its own would spend seconds importing TensorFlow to print one line."""
    with pytest.raises(SystemExit) as refused:
        cli.main(train_arguments(data_dir, output, *extra))
    return str(refused.value)


def untrained_rerun(data_dir, output, *extra, caplog) -> str:
    """What a train command that ends before its first step logs, run in this process (as
    `refusal`): it traces no step."""
    caplog.clear()
    with caplog.at_level(logging.INFO):
        assert cli.main(train_arguments(data_dir, output, *extra)) == 0
    return caplog.text


def run(command, **kwargs):
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, **kwargs)


def train_losses(output):
    lines = (output / "metrics.jsonl").read_text().splitlines()
    return [(r["step"], r["loss"]) for r in map(json.loads, lines) if r["kind"] == "train"]


def test_kill_9_then_rerun_resumes_from_the_last_backup(multi30k_slice, tmp_path):
    output = tmp_path / "run"
    command = train_command(
        multi30k_slice, output, "--max-steps", "40", "--checkpoint-every", "5", "--log-every", "1"
    )
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), TF_CPP_MIN_LOG_LEVEL="2")
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    metadata = output / "backup" / "training_metadata.json"
    deadline = time.monotonic() + 300
    while not (metadata.exists() and len(list((output / "checkpoints").glob("*.h5"))) >= 2):
        assert process.poll() is None, process.stderr.read().decode()[-3000:]
        assert time.monotonic() < deadline, "no backup written in time"
        time.sleep(0.5)
    process.send_signal(signal.SIGKILL)
    process.wait()

    resumed = run(command)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed from" in resumed.stderr
    resumed_step = int(resumed.stderr.split("at step ")[1].split(",")[0])
    assert 5 <= resumed_step < 40
    logged = train_losses(output)
    steps = [step for step, _ in logged]
    # The rerun logged steps resumed+1 .. 40 and never step 1 again: the counter continued.
    assert steps[-(40 - resumed_step) :] == list(range(resumed_step + 1, 41))
    assert steps.count(1) == 1
    # The curve has each step once, in order: what the killed process logged past its backup
    # was trained again, and only the rerun's record counts. (The kill may fall between saving
    # the backup and logging that step, so a step can be missing.)
    metrics = read_metrics(output / "metrics.jsonl")
    curve = [(r["step"], r["loss"]) for r in metrics if r["kind"] == "train"]
    assert [step for step, _ in curve] == sorted(set(steps))
    assert curve[-(40 - resumed_step) :] == logged[-(40 - resumed_step) :]
    assert (output / "model.weights.h5").exists()


def test_same_seed_same_losses(multi30k_slice, tmp_path):
    """Two runs with one seed log the same losses, the second with the first's vocabulary
    (`--subwords`, copied rather than learned again), and no false alarm: Keras warned "Your
    input ran out of data; interrupting training" after every first validation pass, and that it
    ignores `shuffle=True` (the pipeline shuffles)."""
    losses = []
    for name, adopted in (("a", ()), ("b", ("--subwords", str(tmp_path / "a" / "subwords.model")))):
        output = tmp_path / name
        result = run(
            train_command(
                multi30k_slice,
                output,
                *("--max-steps", "6", "--deterministic", "--seed", "7"),
                *("--checkpoint-every", "3", *adopted),
            )
        )
        assert result.returncode == 0, result.stderr[-3000:]
        assert ("training a bpe vocabulary" in result.stderr) != bool(adopted)
        assert "val_loss" in (output / "metrics.jsonl").read_text()
        for false_alarm in ("ran out of data", "shuffle=True"):
            assert false_alarm not in result.stderr + result.stdout
        losses.append(
            [
                r
                for r in map(json.loads, (output / "metrics.jsonl").read_text().splitlines())
                if r["kind"] == "epoch" or r["kind"] == "train"
            ]
        )
    assert [r.get("loss") for r in losses[0]] == [r.get("loss") for r in losses[1]]
    vocabularies = [(tmp_path / name / "subwords.model").read_bytes() for name in ("a", "b")]
    assert vocabularies[0] == vocabularies[1]


def test_corrupt_backup_and_changed_config_are_clear_errors(multi30k_slice, tmp_path, caplog):
    output = tmp_path / "run"
    first = run(
        train_command(
            multi30k_slice,
            output,
            *("--max-steps", "3", "--checkpoint-every", "1"),
            *("--bleu-every", "2", "--bleu-sentences", "8"),
        )
    )
    assert first.returncode == 0, first.stderr[-3000:]
    # Validation BLEU every 2 steps and at the end, in metrics.jsonl and TensorBoard.
    records = [*map(json.loads, (output / "metrics.jsonl").read_text().splitlines())]
    # The optimizer is built before the first step, so no step is traced twice.
    assert [r["train_traces"] for r in records if r["kind"] == "partial_epoch"] == [1]
    bleu = [r for r in records if r["kind"] == "bleu"]
    assert [r["step"] for r in bleu] == [2, 3]
    assert all(0 <= r["val_bleu"] <= 100 and "val_chrf" in r for r in bleu)
    assert list((output / "logs" / "bleu").glob("events.out.tfevents.*"))

    changed = refusal(multi30k_slice, output, "--max-steps", "3", "--set", "d_ff=64")
    assert "d_ff" in changed and "config.json" in changed
    relowered = refusal(multi30k_slice, output, "--max-steps", "3", "--lowercase")
    assert "lowercase=False" in relowered and "another output starts a new run" in relowered
    assert json.loads((output / "run.json").read_text())["lowercase"] is False
    redropped = refusal(multi30k_slice, output, "--max-steps", "3", "--set", "relu_dropout=0.2")
    assert "allow_training_changes" in redropped
    reshaped = ("--set", "d_ff=64", "--allow-training-changes", "--set", "relu_dropout=0.2")
    assert "['d_ff'] fix the model" in refusal(multi30k_slice, output, *reshaped)
    missing = refusal(multi30k_slice, output, "--subwords", str(tmp_path / "none.model"))
    assert f"subwords {tmp_path / 'none.model'}: no such file" in missing
    other = tmp_path / "other.model"
    other.write_bytes((output / "subwords.model").read_bytes() + b"\n")
    relearned = refusal(multi30k_slice, output, "--subwords", str(other))
    assert f"subwords {other} is not the vocabulary" in relearned and "without" in relearned
    assert json.loads((output / "run.json").read_text())["subwords"] is None
    student = tmp_path / "student"
    cased = ("--subwords", str(output / "subwords.model"), "--lowercase")
    assert "is not a lowercasing model" in refusal(multi30k_slice, student, *cased)
    assert not student.exists()

    # Larger batches and BPE-dropout from step 3 on, asked for: the run goes on from its
    # backup, and says so.
    resumed = ("--batch-tokens", "1024", "--set", "subword_dropout=0.1")
    rebatched = run(
        train_command(multi30k_slice, output, "--max-steps", "5", *resumed)
        + ["--allow-training-changes", "--log-every", "1"]
    )
    assert rebatched.returncode == 0, rebatched.stderr[-3000:]
    assert json.loads((output / "config.json").read_text())["batch_tokens"] == 1024
    [change] = json.loads((output / "run.json").read_text())["training_changes"]
    assert change["batch_tokens"] == [512, 1024] and change["subword_dropout"] == [0.0, 0.1]
    assert set(change) == {"time", "batch_tokens", "subword_dropout"}
    assert [step for step, _ in train_losses(output)][-2:] == [4, 5]

    # A run that stops backs up where it stopped: the rerun goes on from step 5, not from the
    # periodic backup at step 3. --patience counts the epochs logged before it, up to step 5
    # (the runs above all stopped mid-epoch: their records are partial_epoch, not counted): two
    # without a lower validation loss end the run at once (a record past step 5 was undone).
    epoch = {"kind": "epoch", "epoch": 9, "time": 9.0}
    plateau = [{**epoch, "step": 5, "val_loss": loss} for loss in (97.0, 99.0, 98.0)]
    undone = {**epoch, "step": 7, "val_loss": 0.1}
    with (output / "metrics.jsonl").open("a") as file:
        file.writelines(json.dumps(r) + "\n" for r in [*plateau, undone])
    patient = untrained_rerun(
        multi30k_slice, output, "--max-steps", "8", *resumed, "--patience", "2", caplog=caplog
    )
    assert "at step 5," in patient
    assert "already stopped improving" in patient and "2 epochs" in patient
    assert [step for step, _ in train_losses(output)][-1] == 5

    # An unreadable backup falls back to the newest readable checkpoint (tests/training/
    # test_faults.py); with none readable either, it is an error.
    for path in [*(output / "backup").rglob("*.h5"), *(output / "checkpoints").glob("*.h5")]:
        path.write_bytes(b"\x00garbage")
    corrupt = refusal(multi30k_slice, output, "--max-steps", "6", *resumed)
    assert "cannot resume from the backup" in corrupt
    assert str(output / "backup") in corrupt


@pytest.mark.long(
    covered_by=[
        "tests/training/test_gradient_accumulation.py::test_two_half_batches_accumulated_make_the_whole_batch_update",
        "tests/training/test_gradient_accumulation.py::test_schedule_counts_updates_not_micro_batches",
    ]
)
def test_accumulated_updates_are_the_counted_steps(multi30k_slice, tmp_path):
    output = tmp_path / "run"
    result = run(
        train_command(
            multi30k_slice,
            output,
            "--accumulate",
            "2",
            "--max-steps",
            "4",
            "--log-every",
            "1",
            "--checkpoint-every",
            "2",
        )
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "2 micro-batch(es) an update" in result.stderr
    # Each update is logged once, though two micro-batches end at its step.
    assert [step for step, _ in train_losses(output)] == [1, 2, 3, 4]
    checkpoints = sorted(p.name for p in (output / "checkpoints").glob("*.h5"))
    assert checkpoints == ["ckpt-00000002.weights.h5", "ckpt-00000004.weights.h5"]

    # In this process, whose CPU tests/conftest.py split into 8 devices before TensorFlow
    # started: a process of its own would import TensorFlow to refuse.
    replicas = refusal(multi30k_slice, tmp_path / "eight", "--accumulate", "2", "--devices", "8")
    assert "accumulate 2 needs a single replica, not 8" in replicas
