"""A server that speaks TensorFlow Serving's REST and gRPC APIs over exported base paths.

TensorFlow Serving's own binary cannot be installed everywhere (not on this project's CPU
machines), so `keras-transformer serve` answers the same requests over the same directory layout
(`<base>/<version>/`), for one model or the models of a model config file, for local use and
tests. In production, the stock container serves the same directory unchanged:

    docker run -p 8500:8500 -p 8501:8501 \\
        -v "$PWD/saved_models/m30k-ende:/models/m30k-ende" -e MODEL_NAME=m30k-ende \\
        tensorflow/serving   # an image with the tensorflow-text ops, e.g. built with them linked in

The parts, one a module:

- `rest` and `grpc_service`: the two APIs (`grpc_service` through the official
  `tensorflow-serving-api` servicers, so its client stubs work);
- `model_config` and `model_manager`: the models by name, from TF Serving's model config file,
  polled and reloaded without failing a request;
- `lifecycle`: the versions under a base path, polled, loaded (warm-up requests included),
  served and unloaded as TF Serving's version policies do;
- `batching`: the bounded queue and server-side batching (TF Serving's batching parameters);
- `limits`: what one request may ask, checked before anything of its size is built;
- `metrics`: Prometheus metrics at `/monitoring/prometheus/metrics`, by model;
- this module: the dispatch both APIs share (deadlines, in-flight requests, metrics) and the
  server's start, graceful drain (on SIGTERM and SIGINT in `keras-transformer serve`) and stop.

The server binds 127.0.0.1 unless told otherwise.
"""

import logging
import signal
import threading
import time
from concurrent import futures
from contextlib import contextmanager
from functools import partial

import grpc

from keras_transformer.errors import KerasTransformerError
from keras_transformer.serving import grpc_service, rest
from keras_transformer.serving.batching import BatchingParameters, BatchScheduler, Task, batch_key
from keras_transformer.serving.errors import ServingError, deadline_exceeded, unavailable
from keras_transformer.serving.limits import Limits
from keras_transformer.serving.metrics import ServingMetrics
from keras_transformer.serving.model_manager import ModelManager
from keras_transformer.serving.servable import AVAILABLE

logger = logging.getLogger(__name__)

MAX_BODY_BYTES = 4 * 1024 * 1024


class ModelServer:
    """REST and gRPC front ends of the models of a `ModelManager`; port 0 picks a free port.

    `rest_api_timeout_in_ms` is a REST request's deadline (TF Serving's flag of that name);
    a gRPC request's is its RPC's. `socket_timeout_s`: how long a REST connection may stall.
    `poll_seconds`: how often each base path is looked at for new versions (None: never); the
    manager's config file is polled as the manager says.
    `apps`: other APIs on the REST port (`rest.Request` -> `rest.Reply` or None), asked in turn
    before TF Serving's routes; append to it before `start()`.

    Example (not run as a doctest: it binds ports)::

        models = ModelManager.from_configs([ModelConfig("m30k-ende", "saved_models/m30k-ende")])
        server = ModelServer(models, rest_port=8501)
        server.start()   # returns at once; server.drain() answers what is in flight and ends it
    """

    def __init__(
        self,
        models: ModelManager,
        host="127.0.0.1",
        rest_port=8501,
        grpc_port=8500,
        max_body_bytes=MAX_BODY_BYTES,
        workers=64,
        limits=None,
        batching=None,
        rest_api_timeout_in_ms=30_000,
        socket_timeout_s=30.0,
        poll_seconds=None,
    ):
        self.models = models
        self.limits = limits or Limits()
        self.max_body_bytes = max_body_bytes
        self.rest_api_timeout_in_ms = rest_api_timeout_in_ms
        self.socket_timeout_s = socket_timeout_s
        self.poll_seconds = poll_seconds
        self.metrics = ServingMetrics(self._weight_bytes)
        self.apps: list = []
        self.scheduler = BatchScheduler(batching or BatchingParameters(), self.metrics)
        self._in_flight = 0
        self._replies_open = 0
        self._draining = False
        self._changed = threading.Condition()
        try:
            self._http = rest.QueueingHTTPServer(
                (host, rest_port),
                rest.handler_class(self),
                self.limits.max_connections,
                self.metrics.evicted.inc,
            )
        except OSError as error:
            self.scheduler.close()
            raise OSError(f"cannot listen for REST on {host}:{rest_port}: {error}") from None
        self.rest_port = self._http.server_address[1]
        self._grpc = grpc.server(
            futures.ThreadPoolExecutor(max_workers=workers),
            options=[
                ("grpc.max_receive_message_length", max_body_bytes),
                ("grpc.so_reuseport", 0),  # a second server on the port fails, not shares it
            ],
        )
        grpc_service.add_services(self, self._grpc)
        try:
            self.grpc_port = self._grpc.add_insecure_port(f"{host}:{grpc_port}")
        except RuntimeError as error:
            self._http.server_close()
            self.scheduler.close()
            raise OSError(f"cannot listen for gRPC on {host}:{grpc_port}: {error}") from None
        self._thread = threading.Thread(target=self._http.serve_forever, daemon=True)

    def start(self):
        self._grpc.start()
        self._thread.start()
        self.models.start_polling(self.poll_seconds)
        host = self._http.server_address[0]
        for model in self.models.all():
            logger.info(
                "serving %s: REST http://%s:%d/v1/models/%s, gRPC %s:%d",
                model.name,
                host,
                self.rest_port,
                model.name,
                host,
                self.grpc_port,
            )
        return self

    # -- dispatch, shared by both APIs ---------------------------------------------------------

    def rest_deadline(self):
        return time.monotonic() + self.rest_api_timeout_in_ms / 1000

    @contextmanager
    def _counted(self, api, name):
        """A request in flight to model `name`: refused while draining, counted in the metrics
        (under its model's name, or "" for a name no model has, so that any name a client
        sends does not become a metric of its own)."""
        with self._changed:
            if self._draining:
                raise unavailable("the server is shutting down")
            self._in_flight += 1
        start, status = time.perf_counter(), "OK"
        try:
            yield
        except ServingError as error:
            status = error.code.name
            raise
        except Exception:
            status = "INTERNAL"
            raise
        finally:
            model = name if self.models.known(name) else ""
            self.metrics.requests.labels(api, model, status).inc()
            self.metrics.latency.labels(api, model).observe(time.perf_counter() - start)
            with self._changed:
                self._in_flight -= 1
                self._changed.notify_all()

    @contextmanager
    def replying(self):
        """A REST reply being made and written: a drain waits until its last byte is sent, so
        the process does not end between a reply's headers and its body."""
        with self._changed:
            self._replies_open += 1
        try:
            yield
        finally:
            with self._changed:
                self._replies_open -= 1
                self._changed.notify_all()

    def predict(
        self, api, name, version, label, signature_name, to_arrays, deadline=None, on_cancel=None
    ) -> dict:
        """Outputs of a predict request: `to_arrays(servable, signature)` gives its checked
        inputs; it waits in the batch queue until `deadline` (a `time.monotonic()` value);
        `on_cancel(callback)` registers what to call if the client goes away. It shares a model
        call with other requests of the same model, version and signature."""
        with self._counted(api, name):
            servable = self.models.get(name).acquire(version, label)
            try:
                signature, _ = servable.signature(signature_name)
                arrays = to_arrays(servable, signature)
                task = Task(
                    run=partial(servable.run, signature),
                    arrays=arrays,
                    rows=next((len(a) for a in arrays.values() if a.ndim), 1),
                    key=batch_key(arrays, (servable.name, servable.version, signature)),
                    deadline=deadline,
                    model=servable.name,
                )
                if on_cancel is not None:
                    on_cancel(task.cancel)
                future = self.scheduler.submit(task)
                timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
                try:
                    return future.result(timeout)
                except futures.TimeoutError:
                    task.cancel()
                    raise deadline_exceeded("the request's deadline passed") from None
            finally:
                servable.release()

    def status_servables(self, name, version=None, label=None):
        return self.models.get(name).status(version, label)

    def status(self, name, version=None, label=None) -> dict:
        return rest.status_reply(self.status_servables(name, version, label))

    def metadata_servable(self, name, version=None, label=None):
        servable = self.models.get(name).acquire(version, label)
        servable.release()
        return servable

    def metadata(self, name, version=None, label=None) -> dict:
        return rest.metadata_reply(self.metadata_servable(name, version, label))

    def _weight_bytes(self):
        """(model, version, bytes of its weights) of each AVAILABLE version, for the metrics."""
        return [
            (model.name, servable.version, servable.weight_bytes)
            for model in self.models.all()
            for servable in model.status()
            if servable.state == AVAILABLE
        ]

    # -- the end -------------------------------------------------------------------------------

    def drain(self, timeout=30.0):
        """Stops taking requests, answers those in flight (up to `timeout` seconds), stops."""
        logger.info("draining: answering %d requests in flight", self._in_flight)
        with self._changed:
            self._draining = True
        self.models.stop_polling()
        if self._thread.is_alive():
            self._http.shutdown()
        self._http.server_close()  # new connections are refused, not left in the backlog
        grpc_stopped = self._grpc.stop(grace=timeout)  # no new RPCs; those running go on
        self.scheduler.close(timeout)  # the queued requests are computed at once
        with self._changed:
            self._changed.wait_for(
                lambda: self._in_flight == 0 and self._replies_open == 0, timeout
            )
        grpc_stopped.wait(timeout)
        logger.info("stopped")

    def stop(self):
        self.drain(timeout=1.0)

    def serve_until_signal(self, drain_timeout=30.0, signals=(signal.SIGTERM, signal.SIGINT)):
        """Blocks until one of `signals` arrives, then drains (`drain(drain_timeout)`).

        Python installs signal handlers only from the main thread of the main interpreter, so
        this must be called there; from another thread it raises `ServerThreadError` before
        changing anything. The previous handlers are restored once the server has drained.
        """
        if threading.current_thread() is not threading.main_thread():
            raise ServerThreadError(
                "serve_until_signal installs signal handlers, which Python allows only in the "
                "main thread; from another thread, call drain() when it should stop"
            )
        stop = threading.Event()
        previous = {signum: signal.signal(signum, lambda *_: stop.set()) for signum in signals}
        try:
            while not stop.wait(3600):  # a timeout, so that the wait lets handlers run
                pass
            self.drain(drain_timeout)
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)


class ServerThreadError(KerasTransformerError, RuntimeError):
    """`ModelServer.serve_until_signal` was called from a thread other than the main one."""
