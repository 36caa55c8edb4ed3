"""The batch queue on its own, with a stand-in model call: which requests share a call, what
each gets back, and what is refused or dropped uncomputed."""

import threading
import time

import grpc
import numpy as np
import pytest

from keras_transformer.server.errors import ServingError
from keras_transformer.server.models.batching import (
    BatchingParameters,
    BatchScheduler,
    Task,
    batch_key,
)


class Recorder:
    """A model call that doubles its `x` rows and records the rows of each call."""

    def __init__(self, gate=None):
        self.calls = []
        self.gate = gate
        self.started = threading.Event()

    def __call__(self, arrays):
        self.started.set()
        if self.gate is not None:
            self.gate.wait(timeout=30)
        self.calls.append(list(arrays["x"]))
        return {"y": arrays["x"] * 2, "first": np.full(len(arrays["x"]), arrays["x"][0])}


def task(run, rows, option=1, deadline=None):
    arrays = {"x": np.asarray(rows), "option": np.asarray(option)}
    return Task(run, arrays, len(rows), batch_key(arrays, "v1"), deadline)


def scheduler(**parameters):
    return BatchScheduler(BatchingParameters(**parameters))


def test_concurrent_requests_share_one_call_and_each_gets_its_own_rows():
    run = Recorder()
    batches = scheduler(enable_batching=True, max_batch_size=8, batch_timeout_micros=10**6)
    tasks = [task(run, [10 * i, 10 * i + 1]) for i in range(4)]  # 8 rows: the batch is full
    futures = [batches.submit(t) for t in tasks]
    results = [f.result(timeout=30) for f in futures]
    assert run.calls == [[0, 1, 10, 11, 20, 21, 30, 31]]
    for i, result in enumerate(results):
        assert result["y"].tolist() == [20 * i, 20 * i + 2]
        assert result["first"].tolist() == [0, 0]  # computed on the whole batch, split back
    batches.close()


def test_a_batch_closes_at_the_timeout_and_never_exceeds_the_largest_size():
    run = Recorder()
    batches = scheduler(enable_batching=True, max_batch_size=3, batch_timeout_micros=20_000)
    futures = [batches.submit(task(run, [i])) for i in range(4)]
    assert [f.result(timeout=30)["y"].tolist() for f in futures] == [[0], [2], [4], [6]]
    assert sorted(run.calls) == [[0, 1, 2], [3]]
    batches.close()


def test_requests_with_other_options_or_two_dimensional_inputs_are_not_merged():
    run = Recorder()
    batches = scheduler(enable_batching=True, max_batch_size=8, batch_timeout_micros=10_000)
    futures = [batches.submit(task(run, [1], option=1)), batches.submit(task(run, [2], option=2))]
    for future in futures:
        future.result(timeout=30)
    assert sorted(run.calls) == [[1], [2]]
    assert batch_key({"ids": np.zeros([1, 3])}, "v1") is None
    batches.close()


def test_without_batching_every_request_is_its_own_call():
    run = Recorder()
    batches = scheduler(enable_batching=False, num_batch_threads=1)
    futures = [batches.submit(task(run, [i])) for i in range(3)]
    assert [f.result(timeout=30)["y"].tolist() for f in futures] == [[0], [2], [4]]
    assert run.calls == [[0], [1], [2]]
    batches.close()


def test_a_full_queue_refuses_at_once_with_resource_exhausted():
    gate = threading.Event()
    run = Recorder(gate)
    batches = scheduler(enable_batching=False, num_batch_threads=1, max_enqueued_batches=2)
    running = batches.submit(task(run, [0]))
    run.started.wait(timeout=30)  # the thread holds the first request
    queued = [batches.submit(task(run, [i])) for i in (1, 2)]
    with pytest.raises(ServingError) as refusal:
        batches.submit(task(run, [3]))
    assert refusal.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert refusal.value.status == 503 and "max_enqueued_batches 2" in str(refusal.value)
    gate.set()
    assert [f.result(timeout=30)["y"].tolist() for f in [running, *queued]] == [[0], [2], [4]]
    batches.close()


def test_expired_and_cancelled_requests_are_dropped_uncomputed():
    gate = threading.Event()
    run = Recorder(gate)
    batches = scheduler(enable_batching=False, num_batch_threads=1)
    first = batches.submit(task(run, [0]))
    run.started.wait(timeout=30)
    expired = task(run, [1], deadline=time.monotonic() + 0.01)
    abandoned = task(run, [2])
    kept = task(run, [3])
    futures = [batches.submit(t) for t in (expired, abandoned, kept)]
    abandoned.cancel()
    time.sleep(0.05)  # the deadline passes while the first request holds the thread
    gate.set()
    assert first.result(timeout=30)["y"].tolist() == [0]
    assert futures[2].result(timeout=30)["y"].tolist() == [6]
    codes = [f.exception(timeout=30).code for f in futures[:2]]
    assert codes == [grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED]
    assert run.calls == [[0], [3]]  # neither dropped request reached the model
    batches.close()


def test_a_request_over_the_largest_batch_is_refused_naming_the_setting():
    batches = scheduler(enable_batching=True, max_batch_size=2)
    with pytest.raises(ServingError, match="max_batch_size") as refusal:
        batches.submit(task(Recorder(), [1, 2, 3]))
    assert refusal.value.code == grpc.StatusCode.INVALID_ARGUMENT
    batches.close()


def test_closing_answers_what_is_queued_then_refuses():
    run = Recorder()
    batches = scheduler(enable_batching=True, max_batch_size=8, batch_timeout_micros=10**7)
    queued = batches.submit(task(run, [5]))
    batches.close(timeout=30)
    assert queued.result(timeout=0)["y"].tolist() == [10]
    with pytest.raises(ServingError) as refusal:
        batches.submit(task(run, [6]))
    assert refusal.value.code == grpc.StatusCode.UNAVAILABLE
