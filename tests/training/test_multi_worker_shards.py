"""Multi-worker reading of a prepared corpus: two TF_CONFIG worker processes on 127.0.0.1, each
reading its own share of the pairs through MultiWorkerMirroredStrategy's
`distribute_datasets_from_function` in the trainer's mode (repeated, for the steps of an epoch
that the trainer counts), together read every kept training pair once in an epoch, though the
shard files do not divide evenly between them."""

import collections
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from test_multi_worker import free_ports

from invented_language import invented_pairs, write_pairs
from pipelines.batching import BatchingSettings
from pipelines.prepare import TextPairs, prepare
from pipelines.prepared import prepared_dataset, read_manifest
from repo_paths import REPO_ROOT

pytestmark = pytest.mark.slow  # two worker processes

WORKER_SCRIPT = Path(__file__).with_name("multi_worker_shards.py")
MAX_LENGTH = 48
BATCH_TOKENS = 192
SHARDS = 7  # odd: shares by shard file would be 4 files against 3
WORKER_TIMEOUT = 90  # seconds, for both workers together


def run_workers(commands, timeout) -> list[tuple[int, str]]:
    """Runs `commands[i]` as worker i of a TF_CONFIG cluster on 127.0.0.1; each one's return
    code and output. Both are killed at the deadline or on any error, and a timeout names what
    each had written."""
    workers = [f"127.0.0.1:{port}" for port in free_ports(len(commands))]
    processes, logs = [], []
    try:
        for index, command in enumerate(commands):
            tf_config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
            env = dict(
                os.environ,
                TF_CONFIG=json.dumps(tf_config),
                PYTHONPATH=str(REPO_ROOT),
                TF_CPP_MIN_LOG_LEVEL="2",
            )
            # A file, not a pipe: a worker blocked on a full pipe would stall the other one too.
            logs.append(tempfile.TemporaryFile("w+"))
            processes.append(
                subprocess.Popen(command, env=env, stdout=logs[-1], stderr=subprocess.STDOUT)
            )
        deadline = time.monotonic() + timeout
        while any(p.poll() is None for p in processes) and time.monotonic() < deadline:
            time.sleep(0.2)
        outputs = []
        for log in logs:
            log.seek(0)
            outputs.append(log.read())
        if any(p.poll() is None for p in processes):
            tails = "\n".join(
                f"--- worker {i} ({'running' if p.poll() is None else f'exit {p.returncode}'}):\n"
                f"{output[-3000:]}"
                for i, (p, output) in enumerate(zip(processes, outputs, strict=True))
            )
            pytest.fail(f"the workers did not finish within {timeout} s\n{tails}")
        return [(p.returncode, output) for p, output in zip(processes, outputs, strict=True)]
    finally:  # neither worker may outlive the test
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
        for log in logs:
            log.close()


def pair_rows(dataset) -> collections.Counter:
    """The real (not padding) (source, target) id rows of a dataset's batches, counted."""
    rows = collections.Counter()
    for (source, _), target in dataset.as_numpy_iterator():
        for source_row, target_row in zip(source, target, strict=True):
            if source_row.any():
                source_ids, target_ids = source_row[source_row != 0], target_row[target_row != 0]
                rows[(tuple(source_ids.tolist()), tuple(target_ids.tolist()))] += 1
    return rows


def read_rows(directory, num_shards=1, shard_index=0) -> collections.Counter:
    return pair_rows(
        prepared_dataset(
            directory,
            "train",
            BatchingSettings(BATCH_TOKENS, MAX_LENGTH),
            num_shards=num_shards,
            shard_index=shard_index,
        )
    )


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """An invented corpus of distinct pairs (some too long, some empty, dropped by prepare),
    prepared into SHARDS train shard files."""
    text = tmp_path_factory.mktemp("text")
    pairs = list(dict.fromkeys(invented_pairs(300, seed=4, long_pairs=3, empty_pairs=2)))
    output = tmp_path_factory.mktemp("prepared") / "xx-yy"
    prepare(
        output,
        TextPairs({"train": write_pairs(text, "train", pairs)}, ("xx", "yy")),
        vocab_size=200,
        max_length=MAX_LENGTH,
        shard_pairs=math.ceil(len(pairs) / SHARDS),
    )
    return output


def test_two_workers_together_read_each_pair_once_per_epoch(prepared, tmp_path):
    split = read_manifest(prepared)["splits"]["train"]
    assert len(split["shards"]) == SHARDS
    assert split["dropped"]["too_long"] and split["dropped"]["empty"]
    everything = read_rows(prepared)
    assert sum(everything.values()) == split["pairs_kept"]
    # Distinct pairs, so that "disjoint" below means no pair read by both workers.
    assert set(everything.values()) == {1}

    outputs = [tmp_path / f"worker{i}.json" for i in range(2)]
    sizes = (str(BATCH_TOKENS), str(MAX_LENGTH))
    finished = run_workers(
        [[sys.executable, str(WORKER_SCRIPT), str(prepared), str(out), *sizes] for out in outputs],
        WORKER_TIMEOUT,
    )
    for index, (returncode, output) in enumerate(finished):
        assert returncode == 0, f"worker {index} exited with {returncode}:\n{output[-3000:]}"

    results = [json.loads(path.read_text()) for path in outputs]
    batch_pairs = BATCH_TOKENS // MAX_LENGTH  # of the one bucket the workers read
    seen = []
    for index, result in enumerate(results):
        log = finished[index][1][-3000:]
        assert result["task_id"] == index, log
        assert result["num_replicas_in_sync"] == 2, log
        # The strategy asked each worker for its own input pipeline, once.
        assert result["contexts"] == [
            {"num_input_pipelines": 2, "input_pipeline_id": index, "num_replicas_in_sync": 2}
        ], log
        assert len(result["rows"]) == result["steps"] * batch_pairs, log  # full batches only
        rows = collections.Counter(
            (tuple(source), tuple(target)) for source, target in result["rows"]
        )
        # Its share is every second pair, as a single reader of that share sees it: all of it
        # read in the epoch, and fewer than a batch of it (the next pass's first) read again.
        own = read_rows(prepared, num_shards=2, shard_index=index)
        assert rows.keys() == own.keys(), f"worker {index} did not read its share once"
        assert rows.total() - len(rows) < batch_pairs, f"worker {index} read its share twice"
        seen.append(own)

    assert results[0]["steps"] == results[1]["steps"]
    assert abs(len(seen[0]) - len(seen[1])) <= 1, "the shares are not equal"
    assert not seen[0].keys() & seen[1].keys(), "a pair was read by both workers"
    assert seen[0] + seen[1] == everything
