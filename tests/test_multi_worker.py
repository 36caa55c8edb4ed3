"""MultiWorkerMirroredStrategy from TF_CONFIG: 2 worker processes on 127.0.0.1 train in step."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np

from repo_paths import REPO_ROOT

WORKER_SCRIPT = Path(__file__).with_name("multi_worker_train.py")


def free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def test_two_workers_finish_with_identical_weights(tmp_path):
    workers = [f"127.0.0.1:{port}" for port in free_ports(2)]
    processes = []
    for index in range(2):
        env = dict(
            os.environ,
            TF_CONFIG=json.dumps(
                {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
            ),
            PYTHONPATH=str(REPO_ROOT),
            TF_CPP_MIN_LOG_LEVEL="2",
        )
        processes.append(
            subprocess.Popen(
                [sys.executable, str(WORKER_SCRIPT), str(tmp_path / f"worker{index}.npz")],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
        )
    for process in processes:
        output, _ = process.communicate(timeout=300)
        assert process.returncode == 0, output.decode()[-3000:]

    results = [np.load(tmp_path / f"worker{i}.npz") for i in range(2)]
    names = [n for n in results[0].files if n.startswith("weight_")]
    assert len(names) > 10
    for name in names:
        np.testing.assert_array_equal(results[0][name], results[1][name])
    assert np.isfinite(results[0]["loss"]).all()
