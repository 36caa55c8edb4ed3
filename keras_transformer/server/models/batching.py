"""Server-side batching with the semantics of TensorFlow Serving's batching parameters.

Requests wait in one bounded queue. `num_batch_threads` threads each take the oldest request
and the queued requests that can share its model call (same model, version, signature and scalar
options; one-dimensional row inputs, such as `text`), up to `max_batch_size` rows, waiting at
most `batch_timeout_micros` after the oldest arrived for more to come. Their rows are
concatenated, decoded by one call, and the outputs split back, so each request gets exactly
its own rows. Without batching every request is a batch of its own, and the same threads and
queue bound the model calls in flight.

A request whose deadline has passed, or whose client has gone, is dropped from the queue
without being computed. The queue holds at most `max_enqueued_batches` batches' worth of
requests; beyond that a request is refused at once (503 / RESOURCE_EXHAUSTED).
"""

import logging
import math
import threading
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field

import numpy as np

from keras_transformer.errors import ConfigError
from keras_transformer.server.errors import (
    ServingError,
    bad_request,
    cancelled,
    deadline_exceeded,
    queue_full,
    unavailable,
)

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class BatchingParameters:
    """TF Serving's `--enable_batching` and its batching parameters file's fields; the `help` of
    each documents it, and `keras-transformer serve`'s flags are generated from them."""

    enable_batching: bool = field(
        default=False,
        metadata={"help": "decode concurrent requests together (default: each on its own)"},
    )
    max_batch_size: int = field(default=32, metadata={"help": "sentences"})
    batch_timeout_micros: int = field(
        default=5000, metadata={"help": "how long a batch waits for more requests after its first"}
    )
    num_batch_threads: int = field(default=4, metadata={"help": "model calls at once"})
    max_enqueued_batches: int = field(
        default=64,
        metadata={"help": "queue bound in batches (a request each without batching); beyond: 503"},
    )

    def __post_init__(self):
        minimums = {
            "max_batch_size": 1,
            "batch_timeout_micros": 0,
            "num_batch_threads": 1,
            "max_enqueued_batches": 1,
        }
        for name, minimum in minimums.items():
            if getattr(self, name) < minimum:
                raise ConfigError(f"{name} {getattr(self, name)} is below {minimum}")


@dataclass(eq=False)
class Task:
    """One request's call: `run(arrays)` → outputs, for `rows` rows; `key` says which tasks may
    share a call (None: none). `deadline` is a `time.monotonic()` value or None; `model` names
    the model in the metrics."""

    run: object
    arrays: dict
    rows: int
    key: object = None
    deadline: float | None = None
    model: str = ""
    future: Future = field(default_factory=Future)
    enqueued: float = field(default_factory=time.monotonic)
    _cancelled: bool = False

    def cancel(self):
        """The client has gone: a task still queued is dropped, not computed."""
        self._cancelled = True

    def refusal(self, now) -> ServingError | None:
        if self._cancelled:
            return cancelled("the request was cancelled before it was computed")
        if self.deadline is not None and now >= self.deadline:
            return deadline_exceeded("the request's deadline passed while it was queued")
        return None


def batch_key(arrays: dict, identity) -> object:
    """Tasks with equal keys can share a call: the same `identity` (model, version, signature),
    equal scalar inputs, and every other input one row per sentence (rank 1)."""
    if any(a.ndim > 1 for a in arrays.values()):
        return None
    scalars = tuple(sorted((k, a.dtype.str, a.tobytes()) for k, a in arrays.items() if a.ndim == 0))
    return (identity, scalars)


def run_together(tasks: list[Task]) -> list[dict]:
    """One call for tasks of one key: rows concatenated, outputs split back by task."""
    first = tasks[0]
    if len(tasks) == 1:
        return [first.run(first.arrays)]
    arrays = {
        name: array if array.ndim == 0 else np.concatenate([t.arrays[name] for t in tasks])
        for name, array in first.arrays.items()
    }
    outputs = first.run(arrays)
    bounds = np.cumsum([0] + [t.rows for t in tasks])
    return [
        {name: value[start:end] for name, value in outputs.items()}
        for start, end in zip(bounds[:-1], bounds[1:], strict=True)
    ]


class BatchScheduler:
    """The queue and batch threads; `submit(task)` returns the task's future."""

    def __init__(self, parameters: BatchingParameters, metrics=None):
        self.parameters = parameters
        self.metrics = metrics
        self._queue: deque[Task] = deque()
        self._rows = 0
        self._open = True
        self._running = 0
        self._changed = threading.Condition()
        self._threads = [
            threading.Thread(target=self._work, name=f"batch-{i}", daemon=True)
            for i in range(parameters.num_batch_threads)
        ]
        for thread in self._threads:
            thread.start()

    def _queued_batches(self, extra_rows=0) -> int:
        if not self.parameters.enable_batching:
            return len(self._queue) + (extra_rows > 0)
        return math.ceil((self._rows + extra_rows) / self.parameters.max_batch_size)

    def submit(self, task: Task) -> Future:
        limit = self.parameters.max_batch_size
        if self.parameters.enable_batching and task.rows > limit:
            raise bad_request(
                f"the request has {task.rows} sentences, over the largest batch of {limit} "
                "(max_batch_size)"
            )
        with self._changed:
            if not self._open:
                raise unavailable("the server is shutting down")
            if self._queued_batches(task.rows) > self.parameters.max_enqueued_batches:
                raise queue_full(
                    f"the queue is full ({len(self._queue)} requests waiting; "
                    f"max_enqueued_batches {self.parameters.max_enqueued_batches})"
                )
            self._queue.append(task)
            self._rows += task.rows
            self._report_depth()
            self._changed.notify_all()
        return task.future

    def _report_depth(self):
        if self.metrics is not None:
            self.metrics.queue_depth.set(len(self._queue))

    def _work(self):
        while True:
            with self._changed:
                batch = self._next_batch()
                if batch is None:
                    return
                self._running += 1
            try:
                self._run(batch)
            finally:
                with self._changed:
                    self._running -= 1
                    self._changed.notify_all()

    def _next_batch(self) -> list[Task] | None:
        """Waits for a batch and takes it from the queue (lock held); None once closed and
        empty."""
        while True:
            self._drop_refused()
            if not self._queue:
                if not self._open:
                    return None
                self._changed.wait()
                continue
            head = self._queue[0]
            mates = [t for t in self._queue if head.key is not None and t.key == head.key]
            batch, rows = self._fill(head, mates)
            wait = head.enqueued + self.parameters.batch_timeout_micros / 1e6 - time.monotonic()
            full = rows >= self.parameters.max_batch_size or len(batch) < len(mates)
            alone = not self.parameters.enable_batching or head.key is None
            if alone or full or wait <= 0 or not self._open:
                for task in batch:
                    self._queue.remove(task)
                    self._rows -= task.rows
                self._report_depth()
                return batch
            self._changed.wait(wait)

    def _fill(self, head, mates):
        batch, rows = [head], head.rows
        if self.parameters.enable_batching:
            for task in mates[1:]:
                if rows + task.rows > self.parameters.max_batch_size:
                    break
                batch.append(task)
                rows += task.rows
        return batch, rows

    def _drop_refused(self):
        now = time.monotonic()
        for task in [t for t in self._queue if t.refusal(now)]:
            self._queue.remove(task)
            self._rows -= task.rows
            task.future.set_exception(task.refusal(now))
            if self.metrics is not None:
                self.metrics.dropped.inc()
        self._report_depth()

    def _run(self, batch: list[Task]):
        if self.metrics is not None:
            self.metrics.batch_size.labels(batch[0].model).observe(sum(t.rows for t in batch))
        try:
            results = run_together(batch)
        except Exception as error:  # the batch's requests all get the error, the thread lives
            if not isinstance(error, ServingError):
                logger.exception("a batch of %d requests failed", len(batch))
            for task in batch:
                task.future.set_exception(error)
            return
        for task, result in zip(batch, results, strict=True):
            task.future.set_result(result)

    def close(self, timeout=None):
        """Refuses new tasks, computes the queued ones, and waits for the threads."""
        with self._changed:
            self._open = False
            self._changed.notify_all()
        for thread in self._threads:
            thread.join(timeout)
