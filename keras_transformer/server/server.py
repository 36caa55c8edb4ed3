"""A server that speaks TensorFlow Serving's REST and gRPC APIs over exported base paths.

TensorFlow Serving's own binary cannot be installed everywhere (not on this project's CPU
machines), so `keras-transformer serve` answers the same requests over the same directory layout
(`<base>/<version>/`), for one model or the models of a model config file, for local use and
tests. In production, the stock container serves the same directory unchanged:

    docker run -p 8500:8500 -p 8501:8501 \\
        -v "$PWD/saved_models/m30k-ende:/models/m30k-ende" -e MODEL_NAME=m30k-ende \\
        tensorflow/serving   # an image with the tensorflow-text ops, e.g. built with them linked in

The parts (the package's docstring lists its modules):

- `apis`: TF Serving's REST API and LibreTranslate's as routes of one Starlette (ASGI)
  application, served by uvicorn (httptools, uvloop); TF Serving's gRPC API on grpcio, through
  the official `tensorflow-serving-api` servicers, so its client stubs work;
- `page`: the web page, and `/docs`, which browses the APIs' OpenAPI contract
  (`/openapi.json`, `apis.openapi`), both added by `keras-transformer serve` unless `--no-ui`;
- `models`: the models by name, their versions, the batching queue, limits and metrics;
- this module: the dispatch all APIs share (deadlines, in-flight requests, metrics), the worker
  threads that take model calls off the event loop, and the server's start, graceful drain (on
  SIGTERM and SIGINT in `keras-transformer serve`) and stop.

HTTP connections, idle or stalled mid-body, cost a socket and a coroutine each, not a thread;
`Network.max_connections` bounds them (beyond, a request is answered 503 by uvicorn). The server
binds 127.0.0.1 unless told otherwise.
"""

import asyncio
import logging
import resource
import signal
import socket
import threading
import time
from concurrent import futures
from contextlib import contextmanager
from functools import partial

import grpc
import uvicorn
from starlette.applications import Starlette
from starlette.routing import BaseRoute
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from keras_transformer.errors import KerasTransformerError
from keras_transformer.server.apis import grpc_service, openapi, rest
from keras_transformer.server.errors import ServingError, deadline_exceeded, unavailable
from keras_transformer.server.models.batching import BatchScheduler, Task, batch_key
from keras_transformer.server.models.metrics import ServingMetrics
from keras_transformer.server.models.model_manager import ModelManager
from keras_transformer.server.models.servable import AVAILABLE
from keras_transformer.server.settings import ServerSettings

logger = logging.getLogger(__name__)


class HeadersInTime(HttpToolsProtocol):
    """uvicorn's HTTP protocol (httptools), which times out a connection only while it is idle
    between requests, with a deadline for a request's headers too: a connection whose client
    sends no request, or stalls in its headers, is closed after the socket timeout, as one idle
    between requests is (a stall mid-body is answered 408 by `apis.http.read_body`)."""

    _headers_due: asyncio.TimerHandle | None = None

    def connection_made(self, transport):
        super().connection_made(transport)
        self._expect_headers()

    def on_message_begin(self):
        super().on_message_begin()
        self._expect_headers()

    def on_headers_complete(self):
        self._headers_in()
        super().on_headers_complete()

    def connection_lost(self, exc):
        self._headers_in()
        super().connection_lost(exc)

    def _expect_headers(self):
        self._headers_in()
        self._headers_due = self.loop.call_later(self.timeout_keep_alive, self._close)

    def _headers_in(self):
        if self._headers_due is not None:
            self._headers_due.cancel()
            self._headers_due = None

    def _close(self):
        if not self.transport.is_closing():
            self.transport.close()


class ModelServer:
    """TF Serving's REST and gRPC APIs over the models of a `ModelManager`, as `settings` say;
    port 0 picks a free port. `add_routes` adds other APIs (LibreTranslate's, the page) to the
    HTTP application.

    A REST request's deadline is `rest_api_timeout_in_ms` (TF Serving's flag of that name); a
    gRPC request's is its RPC's. Each model's base path is polled as its manager says.

    Example (not run as a doctest: it binds ports)::

        models = ModelManager.from_configs([ModelConfig("m30k-ende", "saved_models/m30k-ende")])
        server = ModelServer(models, ServerSettings())
        server.start()   # returns at once; server.drain() answers what is in flight and ends it
    """

    def __init__(self, models: ModelManager, settings: ServerSettings = ServerSettings()):
        self.models = models
        self.settings = settings
        self.limits = settings.limits
        network = settings.network
        self.metrics = ServingMetrics(self._weight_bytes)
        self.scheduler = BatchScheduler(settings.batching, self.metrics)
        self._workers = futures.ThreadPoolExecutor(network.workers, thread_name_prefix="worker")
        self._in_flight = 0
        self._draining = False
        self._on_stop = []
        self._changed = threading.Condition()
        self.openapi = openapi.OpenApi()
        self.openapi.add(openapi.tf_serving_paths())
        self.app = Starlette(
            routes=[*rest.TfServingRest(self).routes(), *self.openapi.routes()],
            exception_handlers={404: rest.malformed, 405: rest.malformed},
        )
        try:
            self._socket = socket.create_server(
                (network.host, network.rest_port),
                family=socket.AF_INET6 if ":" in network.host else socket.AF_INET,
                backlog=network.max_connections,
            )
        except OSError as error:
            self._close_pools()
            raise OSError(
                f"cannot listen for REST on {network.host}:{network.rest_port}: {error}"
            ) from None
        self.rest_port = self._socket.getsockname()[1]
        self._http = uvicorn.Server(self._uvicorn_config(network))
        self._grpc = grpc.server(
            self._workers,
            options=[
                ("grpc.max_receive_message_length", network.max_body_bytes),
                ("grpc.so_reuseport", 0),  # a second server on the port fails, not shares it
            ],
        )
        grpc_service.add_services(self, self._grpc)
        try:
            self.grpc_port = self._grpc.add_insecure_port(f"{network.host}:{network.grpc_port}")
        except RuntimeError as error:
            self._socket.close()
            self._close_pools()
            raise OSError(
                f"cannot listen for gRPC on {network.host}:{network.grpc_port}: {error}"
            ) from None
        self._thread = threading.Thread(
            target=self._http.run, kwargs={"sockets": [self._socket]}, name="http", daemon=True
        )

    def _uvicorn_config(self, network) -> uvicorn.Config:
        return uvicorn.Config(
            self.app,
            http=HeadersInTime,
            loop="uvloop",
            lifespan="off",
            log_config=None,
            access_log=False,
            # uvicorn refuses a request once the connections reach its limit, its own included.
            limit_concurrency=network.max_connections + 1,
            timeout_keep_alive=network.socket_timeout_s,
            timeout_graceful_shutdown=network.drain_timeout_s,
        )

    def add_routes(self, routes: list[BaseRoute], contract: dict | None = None, on_stop=None):
        """Serves `routes` on the HTTP port too (another API, the page), before or after
        `start()`, described in `/openapi.json` by `contract` (OpenAPI paths); TF Serving's
        routes keep their paths. `on_stop()`, if given, releases what the routes hold (files,
        threads) once the server has stopped."""
        self.app.router.routes.extend(routes)
        self.openapi.add(contract or {})
        if on_stop is not None:
            self._on_stop.append(on_stop)

    def start(self):
        self._grpc.start()
        self._thread.start()
        while not self._http.started and self._thread.is_alive():
            time.sleep(0.01)
        self.models.start_polling()
        host = self.settings.network.host
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

    async def call(self, function, *args):
        """`function(*args)` in a worker thread: the event loop goes on with other requests."""
        return await asyncio.get_running_loop().run_in_executor(
            self._workers, partial(function, *args)
        )

    # -- dispatch, shared by both APIs ---------------------------------------------------------

    def rest_deadline(self):
        return time.monotonic() + self.settings.network.rest_api_timeout_in_ms / 1000

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

    def metadata_servable(self, name, version=None, label=None):
        servable = self.models.get(name).acquire(version, label)
        servable.release()
        return servable

    def _weight_bytes(self):
        """(model, version, bytes of its weights) of each AVAILABLE version, for the metrics."""
        return [
            (model.name, servable.version, servable.weight_bytes)
            for model in self.models.all()
            for servable in model.status()
            if servable.state == AVAILABLE
        ]

    # -- the end -------------------------------------------------------------------------------

    def drain(self, timeout=None):
        """Stops taking requests, answers those already read (up to `timeout` seconds, the
        settings' `drain_timeout_s` by default), then stops."""
        timeout = self.settings.network.drain_timeout_s if timeout is None else timeout
        logger.info("draining: answering %d requests in flight", self._in_flight)
        with self._changed:
            self._draining = True
        self.models.stop_polling()
        grpc_stopped = self._grpc.stop(grace=timeout)  # no new RPCs; those running go on
        # uvicorn closes its socket, then waits for the requests it has read to be answered.
        self._http.config.timeout_graceful_shutdown = timeout
        self._http.should_exit = True
        self.scheduler.close(timeout)  # the queued requests are computed at once
        if self._thread.is_alive():
            self._thread.join(timeout + 1)
        else:
            self._socket.close()  # never started: new connections are refused all the same
        with self._changed:
            self._changed.wait_for(lambda: self._in_flight == 0, timeout)
        grpc_stopped.wait(timeout)
        self._close_pools()
        logger.info("stopped")

    def _close_pools(self):
        self.scheduler.close(0)
        self._workers.shutdown(wait=False, cancel_futures=True)
        for release in self._on_stop:
            release()

    def stop(self):
        self.drain(timeout=1.0)

    def serve_until_signal(self, drain_timeout=None, signals=(signal.SIGTERM, signal.SIGINT)):
        """Blocks until one of `signals` arrives, then drains (`drain(drain_timeout)`: by
        default, the settings' `drain_timeout_s`).

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


# File descriptors a server holds besides its HTTP connections: its model files, gRPC's
# connections, the worker threads' files, logging.
OTHER_FILES = 1024


def raise_file_limit(network) -> int:
    """Raises this process's soft limit on open files to what `network.max_connections` needs
    (each connection is a socket), as far as the hard limit allows (a process may do so
    itself); warns when it falls short. Returns the soft limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = network.max_connections + OTHER_FILES
    if soft != resource.RLIM_INFINITY and soft < needed:
        soft = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    if soft != resource.RLIM_INFINITY and soft < needed:
        logger.warning(
            "open files are limited to %d (the hard limit), fewer than max_connections %d "
            "needs: connections beyond are refused by the system",
            soft,
            network.max_connections,
        )
    return soft


class ServerThreadError(KerasTransformerError, RuntimeError):
    """`ModelServer.serve_until_signal` was called from a thread other than the main one."""
