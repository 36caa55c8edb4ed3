"""MultiWorkerMirroredStrategy from TF_CONFIG: 2 worker processes on 127.0.0.1 train in step, by
`fit_under_strategy` and by the `train` command."""

import gzip
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import h5py
import numpy as np
import pytest
from test_training_cli import train_command

from keras_transformer.run_directory import read_metrics
from pipelines import train_sentencepiece
from pipelines.corpus import read_lines
from repo_paths import REPO_ROOT

pytestmark = pytest.mark.slow  # two worker processes

WORKER_SCRIPT = Path(__file__).with_name("multi_worker_train.py")


def free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def run_on_two_workers(commands, timeout=300) -> list[subprocess.CompletedProcess]:
    """Runs `commands[i]` as worker i of a 2-worker TF_CONFIG cluster on 127.0.0.1."""
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
        # A file, not a pipe: a worker blocked on a full pipe would stall the other one too.
        logs.append(tempfile.TemporaryFile("w+"))
        processes.append(
            subprocess.Popen(command, env=env, stdout=logs[-1], stderr=subprocess.STDOUT)
        )
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
    """`keras-transformer train` on two workers given the same --output: the chief writes the
    run, worker 1 keeps its own resumable state in workers/worker-1/, validation runs on both,
    BLEU on the chief alone, and both end with the same weights. A rerun whose workers would
    resume from different steps, or only some of them from a backup, or whose vocabularies or
    epochs differ, stops on all of them with an error instead of training on from weights or ids
    that differ."""
    output = tmp_path / "run"
    worker_run = output / "workers" / "worker-1"

    def train(max_steps, *more, worker_1_data=multi30k_slice):
        extra = ("--max-steps", str(max_steps), "--checkpoint-every", "2", "--log-every", "1")
        return run_on_two_workers(
            [train_command(data, output, *extra, *more) for data in (multi30k_slice, worker_1_data)]
        )

    for process in train(4, "--bleu-every", "2", "--bleu-sentences", "4"):
        assert process.returncode == 0, process.stdout[-3000:]
    bleu_steps = {}
    for run in (output, worker_run):
        records = read_metrics(run / "metrics.jsonl")
        assert [r["step"] for r in records if r["kind"] == "train"] == [1, 2, 3, 4]
        assert any("val_loss" in r for r in records)
        bleu_steps[run] = [r["step"] for r in records if r["kind"] == "bleu"]
    assert bleu_steps == {output: [2, 4], worker_run: []}
    assert (output / "logs" / "bleu").is_dir() and not (worker_run / "logs" / "bleu").exists()
    assert not (output / "workers" / "worker-0").exists()
    chief, worker = (h5_arrays(run / "model.weights.h5") for run in (output, worker_run))
    assert chief.keys() == worker.keys() and len(chief) > 10
    for name, array in chief.items():
        np.testing.assert_array_equal(array, worker[name], err_msg=name)

    step_4_backup = tmp_path / "backup-at-4"
    shutil.copytree(worker_run / "backup", step_4_backup)
    for process in train(6):
        assert process.returncode == 0, process.stdout[-3000:]
    shutil.rmtree(worker_run / "backup")
    shutil.copytree(step_4_backup, worker_run / "backup")
    for process in train(8):
        assert process.returncode != 0
        assert "the workers disagree on the step restored" in process.stdout, process.stdout[-3000:]
    shutil.rmtree(worker_run / "backup")
    for process in train(8):
        assert process.returncode != 0
        assert "the workers disagree on holding a backup" in process.stdout, process.stdout[-3000:]
    # Worker 1's vocabulary learned from the German side alone: the same size, other pieces.
    train_sentencepiece([multi30k_slice / "train.de.gz"], worker_run / "subwords.model", 600)
    for process in train(8):
        assert process.returncode != 0
        assert "the workers disagree on the vocabulary" in process.stdout, process.stdout[-3000:]
    # Worker 1 with the chief's vocabulary but half of its training pairs (allowed as a change
    # of data, which a run otherwise refuses): shorter epochs.
    shutil.copy(output / "subwords.model", worker_run / "subwords.model")
    half = tmp_path / "half"
    shutil.copytree(multi30k_slice, half)
    for language in ("en", "de"):
        lines = read_lines(multi30k_slice / f"train.{language}.gz")
        with gzip.open(half / f"train.{language}.gz", "wt", encoding="utf-8") as file:
            file.writelines(line + "\n" for line in lines[: len(lines) // 2])
    for process in train(8, "--allow-training-changes", worker_1_data=half):
        assert process.returncode != 0
        disagree = "the workers disagree on the steps an epoch"
        assert disagree in process.stdout, process.stdout[-3000:]
