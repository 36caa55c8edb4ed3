"""MultiWorkerMirroredStrategy from TF_CONFIG: 2 worker processes on 127.0.0.1 train in step, by
`fit_under_strategy` and by the `train` command."""

import gzip
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import h5py
import numpy as np
import pytest
from test_faults import assert_readable_and_finite
from test_training_cli import train_command

from keras_transformer.run_directory import read_config, read_metrics
from pipelines.corpus import read_lines
from repo_paths import REPO_ROOT

pytestmark = pytest.mark.slow  # two worker processes

WORKER_SCRIPT = Path(__file__).with_name("multi_worker_train.py")
# How long the chief may take to notice a killed worker and end: a hang, past it.
WORKER_LOST_BOUND = 180


def free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def start_two_workers(commands, scratch: Path | None = None):
    """Starts `commands[i]` as worker i of a 2-worker TF_CONFIG cluster on 127.0.0.1, with
    `scratch` as worker 1's TMPDIR if given; returns the processes and their log files."""
    workers = [f"127.0.0.1:{port}" for port in free_ports(2)]
    processes, logs = [], []
    for index, command in enumerate(commands):
        env = dict(
            os.environ,
            TF_CONFIG=json.dumps(
                {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
            ),
            PYTHONPATH=str(REPO_ROOT),
            TF_CPP_MIN_LOG_LEVEL="2",
        )
        if scratch and index == 1:
            env["TMPDIR"] = str(scratch)
        # A file, not a pipe: a worker blocked on a full pipe would stall the other one too.
        logs.append(tempfile.TemporaryFile("w+"))
        processes.append(
            subprocess.Popen(command, env=env, stdout=logs[-1], stderr=subprocess.STDOUT)
        )
    return processes, logs


def finish(processes, logs, timeout=300) -> list[subprocess.CompletedProcess]:
    """Waits for each process (at most `timeout` seconds, else TimeoutExpired) and reads its log."""
    finished = []
    try:
        for process, log in zip(processes, logs, strict=True):
            returncode = process.wait(timeout)
            log.seek(0)
            finished.append(subprocess.CompletedProcess(process.args, returncode, log.read()))
    finally:  # one worker timed out: the other must not outlive the test either
        for process, log in zip(processes, logs, strict=True):
            if process.poll() is None:
                process.kill()
            log.close()
    return finished


def run_on_two_workers(commands, timeout=300, scratch=None) -> list[subprocess.CompletedProcess]:
    """Runs `commands[i]` as worker i of a 2-worker TF_CONFIG cluster on 127.0.0.1."""
    return finish(*start_two_workers(commands, scratch), timeout)


def test_two_workers_finish_with_identical_weights(tmp_path):
    finished = run_on_two_workers(
        [[sys.executable, str(WORKER_SCRIPT), str(tmp_path / f"worker{i}.npz")] for i in (0, 1)]
    )
    for process in finished:
        assert process.returncode == 0, process.stdout[-3000:]

    results = [np.load(tmp_path / f"worker{i}.npz") for i in range(2)]
    names = [n for n in results[0].files if n.startswith("weight_")]
    assert len(names) > 10
    for name in names:
        np.testing.assert_array_equal(results[0][name], results[1][name])
    assert np.isfinite(results[0]["loss"]).all()


def h5_arrays(path) -> dict:
    arrays = {}
    with h5py.File(path) as file:
        file.visititems(
            lambda name, item: (
                arrays.update({name: item[()]}) if isinstance(item, h5py.Dataset) else None
            )
        )
    return arrays


def test_train_command_on_two_workers_with_one_run_directory(multi30k_slice, tmp_path):
    """`keras-transformer train` on two workers given the same --output: the chief alone writes
    the run, worker 1 only a scratch directory that it deletes; validation runs on both, BLEU on
    the chief alone. A rerun whose workers' vocabularies or epochs differ stops on all of them
    with an error instead of training on ids that differ."""
    output = tmp_path / "run"
    scratch = tmp_path / "worker-1-tmp"
    scratch.mkdir()

    def train(max_steps, *more, worker_1=()):
        extra = ("--max-steps", str(max_steps), "--checkpoint-every", "2", "--log-every", "1")
        commands = [
            train_command(data, output, *extra, *more, *own)
            for data, own in ((multi30k_slice, ()), worker_1)
        ]
        return run_on_two_workers(commands, scratch=scratch)

    for process in train(
        4, "--bleu-every", "2", "--bleu-sentences", "4", worker_1=(multi30k_slice, ())
    ):
        assert process.returncode == 0, process.stdout[-3000:]
    records = read_metrics(output / "metrics.jsonl")
    assert [r["step"] for r in records if r["kind"] == "train"] == [1, 2, 3, 4]
    assert any("val_loss" in r for r in records)
    assert [r["step"] for r in records if r["kind"] == "bleu"] == [2, 4]
    assert sorted(p.name for p in output.iterdir()) == CLEAN_RUN
    assert [*scratch.iterdir()] == []

    # Worker 1 on half of the training pairs learns other pieces; given the chief's vocabulary,
    # it has shorter epochs.
    half = tmp_path / "half"
    shutil.copytree(multi30k_slice, half)
    for language in ("en", "de"):
        lines = read_lines(multi30k_slice / f"train.{language}.gz")
        with gzip.open(half / f"train.{language}.gz", "wt", encoding="utf-8") as file:
            file.writelines(line + "\n" for line in lines[: len(lines) // 2])
    for process in train(8, worker_1=(half, ())):
        assert process.returncode != 0
        assert "the workers disagree on the vocabulary" in process.stdout, process.stdout[-3000:]
    for process in train(8, worker_1=(half, ("--subwords", str(output / "subwords.model")))):
        assert process.returncode != 0
        disagree = "the workers disagree on the steps an epoch"
        assert disagree in process.stdout, process.stdout[-3000:]
    assert [*scratch.iterdir()] == []


# What a clean run leaves in its directory: the chief's files, nothing of the other workers.
CLEAN_RUN = sorted(
    [
        "backup",
        "checkpoints",
        "config.json",
        "logs",
        "metrics.jsonl",
        "model.weights.h5",
        "run.json",
        "subwords.model",
        "train.lock",
    ]
)


def train_steps_logged(output) -> list[int]:
    return [r["step"] for r in read_metrics(output / "metrics.jsonl") if r["kind"] == "train"]


@pytest.mark.long(
    covered_by=[
        "tests/training/test_distribution.py::test_a_lost_worker_is_one_error_that_says_to_rerun_every_worker",
        "tests/training/test_training_cli.py::test_kill_9_then_rerun_resumes_from_the_last_backup",
        "tests/training/test_multi_worker.py::test_train_command_on_two_workers_with_one_run_directory",
    ]
)
def test_kill_9_of_a_worker_ends_the_other_and_the_rerun_resumes(multi30k_slice, tmp_path):
    """kill -9 of worker 1 mid-run ends the chief with one line instead of a hang, every
    weights file left is readable and finite, and rerunning the cluster command resumes both
    workers from the chief's backup and finishes the run as a clean one would have."""
    output = tmp_path / "run"
    extra = ("--max-steps", "12", "--checkpoint-every", "2", "--log-every", "1")
    command = train_command(multi30k_slice, output, *extra)
    scratches = [tmp_path / "killed-tmp", tmp_path / "rerun-tmp"]  # worker 1's TMPDIR
    for scratch in scratches:
        scratch.mkdir()
    processes, logs = start_two_workers([command, command], scratches[0])
    deadline = time.monotonic() + 300
    while not (output / "metrics.jsonl").exists() or max(train_steps_logged(output), default=0) < 4:
        assert all(p.poll() is None for p in processes), "a worker ended before the kill"
        assert time.monotonic() < deadline, "no step 4 in time"
        time.sleep(0.3)
    processes[1].send_signal(signal.SIGKILL)
    chief = finish(processes, logs, timeout=WORKER_LOST_BOUND)[0]

    assert chief.returncode == 1, chief.stdout[-3000:]
    last_line = chief.stdout.strip().splitlines()[-1]
    assert last_line.startswith("keras-transformer train: error: a worker of the cluster"), (
        chief.stdout[-3000:]
    )
    assert "rerun the same command on every worker" in last_line
    config = read_config(output)
    assert_readable_and_finite([*output.rglob("*.h5")], config)

    resumed = run_on_two_workers([command, command], scratch=scratches[1])
    for process in resumed:
        assert process.returncode == 0, process.stdout[-3000:]
    assert "resumed from" in resumed[0].stdout
    assert train_steps_logged(output) == list(range(1, 13))
    assert sorted(p.name for p in output.iterdir()) == CLEAN_RUN
    assert sorted(p.name for p in (output / "checkpoints").iterdir()) == sorted(
        f"ckpt-{step:08d}.weights.h5" for step in (4, 6, 8, 10, 12)
    )
    assert_readable_and_finite([*output.rglob("*.h5")], config)
    assert [*scratches[1].iterdir()] == []
