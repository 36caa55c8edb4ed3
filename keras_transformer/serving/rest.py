"""TensorFlow Serving's REST API over a `ModelServer`'s dispatch.

- `GET /v1/models/NAME[/versions/V | /labels/L]`: each version's state (LOADING, AVAILABLE,
  UNLOADING, END);
- `GET .../metadata`: the SignatureDefMap;
- `POST .../NAME[/versions/V]:predict`: the row format (`"instances"` → `"predictions"`) or the
  columnar format (`"inputs"` → `"outputs"`) and `"signature_name"`; strings may be given as
  `{"b64": ...}`;
- `GET /monitoring/prometheus/metrics`: the Prometheus metrics;
- `GET /v1/models` (ours, not TF Serving's): every model and version, with its state, labels,
  weight bytes and languages.

Other APIs on the same port (LibreTranslate's, the web page) are `apps` of the server: each is
asked first, with a `Request`, and answers with a `Reply`, or None when the request is not its.

A version label (`/labels/L`) is one of the model config's `version_labels`. Errors are
`{"error": "..."}` with the status of `errors.ServingError`; a version in the path is an int64,
as in TF Serving. Bodies are read by Content-Length or chunked transfer encoding, up to a size
limit; a client that stalls mid-request is dropped after the socket timeout. Beyond
`Limits.max_connections` connections at once, a new one takes the place of the one that has
waited longest for its client, which is closed; only when every connection held is being
answered is the new one answered 503 and closed.
"""

import base64
import binascii
import json
import logging
import re
import selectors
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from email.message import Message
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import numpy as np
from google.protobuf import json_format

from keras_transformer.serving.errors import ServingError, bad_request, not_found, too_large
from keras_transformer.serving.metrics import METRICS_PATH

logger = logging.getLogger(__name__)

MODELS_PATH = "/v1/models"
INT64_MAX = 2**63 - 1

ROUTE = re.compile(
    r"^/v1/models/(?P<name>[^/:]+)"
    r"(?:/versions/(?P<version>[0-9]+)|/labels/(?P<label>[^/:]+))?"
    r"(?P<verb>:predict|/metadata)?$"
)


@dataclass
class Request:
    """One HTTP request as an app sees it; `body()` reads the body (size-limited) once."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: Message
    client: str
    read_body: Callable[[], bytes]
    _body: bytes | None = None

    def body(self) -> bytes:
        if self._body is None:
            self._body = self.read_body()
        return self._body


@dataclass
class Reply:
    """An app's answer: status, body, its content type, and any other headers."""

    status: HTTPStatus
    body: bytes
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def json(cls, value, status=HTTPStatus.OK, headers=None) -> "Reply":
        return cls(status, json.dumps(value).encode("utf-8"), headers=headers or {})


def _from_json(value):
    """JSON values → Python values TensorFlow takes; `{"b64": ...}` → bytes."""
    if isinstance(value, dict):
        if set(value) == {"b64"}:
            try:
                # Line-wrapped base64 (the `base64` tool's, MIME's) is still base64.
                return base64.b64decode("".join(value["b64"].split()), validate=True)
            except (AttributeError, binascii.Error, TypeError, ValueError) as error:
                raise bad_request(f"invalid base64 {value['b64']!r}: {error}") from None
        raise bad_request(f"unexpected object {value!r} in a tensor value")
    if isinstance(value, list):
        return [_from_json(v) for v in value]
    return value


def _to_json(value):
    if isinstance(value, np.ndarray):
        return [_to_json(v) for v in value] if value.ndim else _to_json(value.item())
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return {"b64": base64.b64encode(value).decode("ascii")}
    if isinstance(value, np.generic):
        return value.item()
    return value


def predict_inputs(body, names) -> tuple:
    """(row format?, {input: value}) of a `:predict` body, for a signature's input `names`."""
    if not isinstance(body, dict) or ("instances" in body) == ("inputs" in body):
        raise bad_request('the request must have exactly one of "instances" or "inputs"')
    if "instances" in body:
        instances = body["instances"]
        if not isinstance(instances, list) or not instances:
            raise bad_request('"instances" must be a non-empty list')
        if all(isinstance(i, dict) and set(i) != {"b64"} for i in instances):
            if any(set(i) != set(names) for i in instances):
                raise bad_request(f"every instance must have exactly the inputs {names}")
            return True, {k: [_from_json(i[k]) for i in instances] for k in names}
        if len(names) == 1:
            return True, {names[0]: _from_json(instances)}
        raise bad_request(f"each instance must be an object with the inputs {names}")
    columns = body["inputs"]
    if isinstance(columns, dict):
        return False, {k: _from_json(v) for k, v in columns.items()}
    if len(names) == 1:
        return False, {names[0]: _from_json(columns)}
    raise bad_request(f'"inputs" must be an object with the inputs {names}')


def predict_reply(rows: bool, outputs: dict) -> dict:
    if not rows:
        if len(outputs) == 1:
            return {"outputs": _to_json(next(iter(outputs.values())))}
        return {"outputs": {k: _to_json(v) for k, v in outputs.items()}}
    if len(outputs) == 1:
        return {"predictions": _to_json(next(iter(outputs.values())))}
    count = len(next(iter(outputs.values())))
    return {"predictions": [{k: _to_json(v[i]) for k, v in outputs.items()} for i in range(count)]}


def status_reply(servables) -> dict:
    return {
        "model_version_status": [
            {
                "version": str(s.version),
                "state": s.state,
                "status": {
                    "error_code": "UNKNOWN" if s.error else "OK",
                    "error_message": s.error,
                },
            }
            for s in servables
        ]
    }


def metadata_reply(servable) -> dict:
    return {
        "model_spec": {
            "name": servable.name,
            "signature_name": "",
            "version": str(servable.version),
        },
        "metadata": {
            "signature_def": json_format.MessageToDict(
                servable.signature_def_map, preserving_proto_field_name=True
            )
        },
    }


def models_reply(models) -> dict:
    """`GET /v1/models` (ours, not TF Serving's): each of `models` (`ServedModel`s), each
    version's state, labels, weight bytes and languages (a multilingual model's target tokens
    too)."""
    return {
        "models": [
            {"name": model.name, "versions": [_version_entry(model, s) for s in model.status()]}
            for model in models
        ]
    }


def _version_entry(model, servable) -> dict:
    info = servable.info
    return {
        "version": servable.version,
        "state": servable.state,
        "labels": model.labels_of(servable.version),
        "weight_bytes": servable.weight_bytes,
        "source_language": info.get("source_language"),
        "target_language": info.get("target_language"),
        "target_language_tokens": info.get("target_language_tokens", {}),
    }


def _version(match):
    """The path's version: an int64, as TF Serving's; a longer number is refused before Python
    converts it (past 4,300 digits its conversion raises)."""
    text = match["version"]
    if text is None:
        return None
    digits = text.lstrip("0") or "0"
    if len(digits) > len(str(INT64_MAX)) or int(digits) > INT64_MAX:
        shown = text if len(text) <= 40 else f"{text[:20]}...({len(text)} digits)"
        raise bad_request(f"Failed to convert version: {shown} to numeric.")
    return int(digits)


def handler_class(server):
    """The request handler of `server` (a `ModelServer`) for `http.server`."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        timeout = server.socket_timeout_s  # a stalled client frees its thread

        def log_message(self, format, *args):  # route the access log to logging
            logger.debug("%s %s", self.address_string(), format % args)

        def handle_one_request(self):
            # `self.server` is the `QueueingHTTPServer`: from here until the request is read
            # whole, the connection waits for its client and may be evicted.
            self.server.waiting(self.connection)
            try:
                super().handle_one_request()
            except OSError:
                if self.server.holds(self.connection):
                    raise
                self.close_connection = True  # evicted: an error reply met its shut socket

        def _reply(self, status, data: bytes, content_type="application/json", headers=None):
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(data)

        def _route(self, method, request: Request):
            path = self.path.split("?")[0]
            if method == "GET" and path == METRICS_PATH:
                return server.metrics.exposition(), "text/plain; version=0.0.4"
            if method == "GET" and path.rstrip("/") == MODELS_PATH:
                reply = models_reply(server.models.all())
                return json.dumps(reply).encode("utf-8"), "application/json"
            match = ROUTE.match(path)
            if not match:
                raise not_found(f"Malformed request: {method} {self.path}")
            verb = match["verb"]
            if method == "GET" and verb is None:
                reply = server.status(match["name"], _version(match), match["label"])
            elif method == "GET" and verb == "/metadata":
                reply = server.metadata(match["name"], _version(match), match["label"])
            elif method == "POST" and verb == ":predict":
                reply = self._predict(match, request)
            else:
                raise not_found(f"Malformed request: {method} {self.path}")
            return json.dumps(reply).encode("utf-8"), "application/json"

        def _predict(self, match, request: Request):
            body = self._json_body(request)
            signature_name = body.get("signature_name") if isinstance(body, dict) else None
            rows = []

            def arrays(servable, signature):
                names = sorted(servable.input_specs(signature))
                row_format, inputs = predict_inputs(body, names)
                rows.append(row_format)
                return servable.arrays(signature, inputs, server.limits)

            outputs = server.predict(
                "rest",
                match["name"],
                _version(match),
                match["label"],
                signature_name,
                arrays,
                deadline=server.rest_deadline(),
            )
            return predict_reply(rows[0], outputs)

        def _body(self) -> bytes:
            if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
                return self._chunked_body()
            header = self.headers.get("Content-Length", "0")
            if not (header.isascii() and header.isdigit()):  # read(-1) waits for the client
                self.close_connection = True
                raise bad_request(f"Content-Length {header!r} is not a byte count")
            length = int(header)
            self._check_size(length)
            body = self.rfile.read(length)
            if len(body) < length:  # its client closed the connection, or it was evicted
                raise ConnectionAbortedError(f"the body ended {length - len(body)} bytes short")
            return body

        def _check_size(self, length):
            if length > server.max_body_bytes:
                self.close_connection = True  # the unread body must not be taken as a request
                raise too_large(
                    f"request body of {length} bytes exceeds the limit of {server.max_body_bytes}"
                )

        def _chunked_body(self) -> bytes:
            """A body sent in chunks (RFC 9112 §7.1): size lines, data, an empty last chunk."""
            body = bytearray()
            while True:
                line = self.rfile.readline(1024).split(b";")[0].strip()
                try:
                    size = int(line, 16)
                except ValueError:
                    self.close_connection = True
                    raise bad_request(f"chunk size {line[:40]!r} is not hexadecimal") from None
                if size == 0:
                    break
                self._check_size(len(body) + size)
                body += self.rfile.read(size)
                self.rfile.readline(16)  # the CRLF after the chunk's data
            while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):  # trailer fields
                pass
            return bytes(body)

        def _json_body(self, request: Request):
            data = request.body()
            try:
                return json.loads(data or b"null")
            except (json.JSONDecodeError, UnicodeDecodeError) as error:
                raise bad_request(f"JSON Parse error: {error}") from None
            except RecursionError:
                raise bad_request("JSON Parse error: nested too deeply") from None

        def _serve(self, method):
            with server.replying():
                self._answer(method)

        def _request(self, method) -> Request:
            url = urlsplit(self.path)
            return Request(
                method,
                url.path,
                parse_qs(url.query),
                self.headers,
                self.client_address[0],
                self._body,
            )

        def _read_request(self, method) -> Request:
            """The request with its body read, after which the connection is being answered;
            ConnectionAbortedError if it was evicted while its body was read."""
            request = self._request(method)
            try:
                request.body()
            finally:  # a body too large or malformed is answered too, unless evicted
                if not self.server.answering(self.connection):
                    raise ConnectionAbortedError("evicted while waiting for the client")
            return request

        def _answer(self, method):
            try:
                request = self._read_request(method)
                for app in server.apps:
                    reply = app(request)
                    if reply is not None:
                        self._reply(reply.status, reply.body, reply.content_type, reply.headers)
                        return
                data, content_type = self._route(method, request)
                self._reply(HTTPStatus.OK, data, content_type)
            except ServingError as error:
                self._reply(error.status, json.dumps({"error": str(error)}).encode("utf-8"))
            except (TimeoutError, ConnectionAbortedError):  # stalled or cut mid-body, evicted
                self.close_connection = True
            except RecursionError:
                self._reply(HTTPStatus.BAD_REQUEST, b'{"error": "input nested too deeply"}')
            except Exception as error:  # never let one request take the server down
                logger.exception("request failed")
                message = json.dumps({"error": str(error)}).encode("utf-8")
                self._reply(HTTPStatus.INTERNAL_SERVER_ERROR, message)

        def do_GET(self):
            self._serve("GET")

        def do_POST(self):
            self._serve("POST")

        def do_OPTIONS(self):
            self._serve("OPTIONS")

    return Handler


REFUSAL_BODY = b'{"error": "too many connections at once; try again later"}'
REFUSAL = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
    b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(REFUSAL_BODY), REFUSAL_BODY)
)


class Refusals:
    """Connections refused for want of a thread, answered by one thread for them all: each is
    sent 503 at once, then read and dropped until the client closes it or `linger_s` passes, so
    that the client can send its request and read the reply (a socket closed with bytes unread
    is reset, and the reply lost with it). The thread runs while there are such connections."""

    def __init__(self, linger_s=2.0):
        self.linger_s = linger_s
        self._selector = selectors.DefaultSelector()
        self._arrived: list[socket.socket] = []
        self._running = False
        self._lock = threading.Lock()

    def refuse(self, connection: socket.socket):
        connection.setblocking(False)
        try:
            connection.sendall(REFUSAL)  # a fresh socket's buffer takes it whole
            connection.shutdown(socket.SHUT_WR)
        except OSError:  # the client has gone
            connection.close()
            return
        with self._lock:
            self._arrived.append(connection)
            if not self._running:
                self._running = True
                threading.Thread(target=self._drop_when_done, name="refusals", daemon=True).start()

    def _drop_when_done(self):
        while True:
            with self._lock:
                arrived, self._arrived = self._arrived, []
                if not arrived and not self._selector.get_map():
                    self._running = False
                    return
            for connection in arrived:
                self._selector.register(connection, selectors.EVENT_READ, time.monotonic())
            for key, _ in self._selector.select(timeout=0.05):
                if not _read_some(key.fileobj):
                    self._drop(key.fileobj)
            now = time.monotonic()
            for key in list(self._selector.get_map().values()):
                if now - key.data > self.linger_s:
                    self._drop(key.fileobj)

    def _drop(self, connection):
        self._selector.unregister(connection)
        connection.close()


def _read_some(connection) -> bool:
    """Reads what `connection` holds; False once the client has closed it, or it failed."""
    try:
        return bool(connection.recv(65536))
    except BlockingIOError:
        return True
    except OSError:
        return False


class QueueingHTTPServer(ThreadingHTTPServer):
    """A thread a connection, `max_connections` at most. A connection held is either waiting
    for its client (idle before a request, or reading one) or being answered (its request read
    whole). A new connection beyond the bound evicts the one that has waited longest: it is
    shut down, so that its thread's read ends and frees its place, and the new one is served
    (the threads of evicted connections, still ending, may briefly exceed the bound). So
    clients that stall mid-request cannot shut others out, as they cannot TF Serving's event
    loop. Only when every connection held is being answered is a new one answered 503 and
    closed by `Refusals`' one thread, which starts none for it. Connections not yet accepted
    wait in the backlog. `on_evict()` is called at each eviction (a metric)."""

    daemon_threads = True
    request_queue_size = 256

    def __init__(self, address, handler, max_connections: int, on_evict=lambda: None):
        super().__init__(address, handler)
        self.max_connections = max_connections
        self.on_evict = on_evict
        # Each connection held: since when it has waited for its client; None: being answered.
        self._waiting_since: dict[socket.socket, float | None] = {}
        self._lock = threading.Lock()
        self._refusals = Refusals()

    def waiting(self, connection: socket.socket):
        """`connection` waits for its client's next request, from now if it was being answered
        (a new connection has waited since it was accepted)."""
        with self._lock:
            held = self._waiting_since
            if connection in held and held[connection] is None:
                held[connection] = time.monotonic()

    def holds(self, connection: socket.socket) -> bool:
        """False once `connection` has been evicted."""
        with self._lock:
            return connection in self._waiting_since

    def answering(self, connection: socket.socket) -> bool:
        """`connection` is being answered from now; False if it was evicted."""
        with self._lock:
            held = connection in self._waiting_since
            if held:
                self._waiting_since[connection] = None
            return held

    def process_request(self, request, client_address):
        with self._lock:
            evicted = self._make_room()
            admitted = len(self._waiting_since) < self.max_connections
            if admitted:
                self._waiting_since[request] = time.monotonic()  # for its first request
        if evicted is not None:
            self._evict(*evicted)
        if admitted:
            super().process_request(request, client_address)
        else:
            self._refusals.refuse(request)

    def _make_room(self):
        """Under the lock, at the bound: (connection, seconds waited) of the one waiting
        longest, no longer held; None below the bound or when every one is being answered."""
        held = self._waiting_since
        waiting = [connection for connection, since in held.items() if since is not None]
        if len(held) < self.max_connections or not waiting:
            return None
        connection = min(waiting, key=held.get)
        return connection, time.monotonic() - held.pop(connection)

    def _evict(self, connection: socket.socket, waited_s: float):
        try:
            connection.shutdown(socket.SHUT_RDWR)  # its thread's blocked read returns b""
        except OSError:  # already closed by its client or its thread
            return
        logger.debug("evicted a connection that waited %.1f s for its client", waited_s)
        self.on_evict()

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._lock:
                self._waiting_since.pop(request, None)
