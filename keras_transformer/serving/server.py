"""A server that speaks TensorFlow Serving's REST and gRPC APIs over an exported base path.

TensorFlow Serving's own binary cannot be installed everywhere (not on this project's CPU
machines), so `keras-transformer serve` answers the same requests over the same directory layout
(`<base>/<version>/`), for local use and tests. In production, the stock container serves the
same directory unchanged:

    docker run -p 8500:8500 -p 8501:8501 \\
        -v "$PWD/saved_models/m30k-ende:/models/m30k-ende" -e MODEL_NAME=m30k-ende \\
        tensorflow/serving   # an image with the tensorflow-text ops, e.g. built with them linked in

What it implements, as TF Serving documents it:

- REST: `GET /v1/models/NAME[/versions/V]` (version status), `GET .../metadata` (the
  SignatureDefMap), `POST .../NAME[/versions/V]:predict` with the row format (`"instances"` →
  `"predictions"`) or the columnar format (`"inputs"` → `"outputs"`) and `"signature_name"`;
  strings may be given as `{"b64": ...}`. Errors are `{"error": "..."}`: 400 for a malformed
  request (bad JSON, unknown signature or input, wrong dtype or shape), 404 for an unknown model
  or version, 413 for a body over the size limit.
- gRPC: `tensorflow.serving.PredictionService` `Predict` and `GetModelMetadata`, through the
  servicer base class of the official `tensorflow-serving-api` package, so its client stub works.
- Warm-up: the version's `assets.extra/tf_serving_warmup_requests` (Predict records) run once at
  load, before it serves, as TF Serving runs them; an export with `--jit-compile` writes them.

The highest version under the base path is served. The server binds 127.0.0.1 unless told
otherwise. Requests beyond `max_concurrent` model calls wait their turn (they are queued, never
dropped).
"""

import base64
import binascii
import json
import logging
import re
import threading
import time
from concurrent import futures
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import grpc
import numpy as np
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the tokenizer ops the SavedModel uses)
from google.protobuf import json_format
from tensorflow.core.protobuf import saved_model_pb2
from tensorflow_serving.apis import (
    get_model_metadata_pb2,
    predict_pb2,
    prediction_log_pb2,
    prediction_service_pb2_grpc,
)

from keras_transformer.serving.saved_model import WARMUP_REQUESTS, versions

logger = logging.getLogger(__name__)

MAX_BODY_BYTES = 4 * 1024 * 1024
DEFAULT_SIGNATURE = "serving_default"


class ServingError(Exception):
    """A request that cannot be served; `status` is the HTTP status it maps to."""

    def __init__(self, status: HTTPStatus, message: str):
        super().__init__(message)
        self.status = status


def _bad_request(message):
    return ServingError(HTTPStatus.BAD_REQUEST, message)


class ServedModel:
    """The highest version of a model under `base_path`, loaded, with its signatures."""

    def __init__(self, name, base_path, max_concurrent=4):
        self.name = name
        available = versions(base_path)
        if not available:
            raise FileNotFoundError(f"no integer version directory under {base_path}")
        self.version = available[-1]
        path = Path(base_path) / str(self.version)
        self.signatures = tf.saved_model.load(str(path)).signatures
        saved_model = saved_model_pb2.SavedModel.FromString((path / "saved_model.pb").read_bytes())
        self.signature_def_map = get_model_metadata_pb2.SignatureDefMap()
        for key, signature in saved_model.meta_graphs[0].signature_def.items():
            if not key.startswith("__"):  # TF's internal entries (e.g. __saved_model_init_op)
                self.signature_def_map.signature_def[key].CopyFrom(signature)
        self._slots = threading.BoundedSemaphore(max_concurrent)
        self.warmup_requests = self._warm_up(path / WARMUP_REQUESTS)
        logger.info("serving %s version %d from %s", name, self.version, path)

    def _warm_up(self, records) -> int:
        """Runs the version's warm-up requests, as TensorFlow Serving does at load (an export
        with XLA compiles its search for the common source widths there); returns their count."""
        if not records.exists():
            return 0
        start = time.perf_counter()
        count = 0
        for count, serialized in enumerate(tf.data.TFRecordDataset(str(records)), start=1):
            log = prediction_log_pb2.PredictionLog.FromString(serialized.numpy())
            try:
                self.predict_request(log.predict_log.request)
            except ServingError as error:
                raise ValueError(f"warm-up request {count} of {records} failed: {error}") from None
        logger.info("ran %d warm-up requests in %.1f s", count, time.perf_counter() - start)
        return count

    def check(self, name, version=None):
        if name != self.name:
            raise ServingError(HTTPStatus.NOT_FOUND, f"Servable not found for request: {name}")
        if version not in (None, "", 0) and int(version) != self.version:
            raise ServingError(
                HTTPStatus.NOT_FOUND,
                f"Servable not found for request: Specific({name}, {version})",
            )

    def signature(self, signature_name):
        name = signature_name or DEFAULT_SIGNATURE
        if name not in self.signatures:
            raise _bad_request(
                f'Serving signature name: "{name}" not found in signature def; '
                f"signatures: {sorted(self.signatures)}"
            )
        return name, self.signatures[name]

    def input_names(self, signature_name):
        return sorted(self.signature(signature_name)[1].structured_input_signature[1])

    def predict_request(self, request: predict_pb2.PredictRequest) -> dict:
        """`predict` on a `PredictRequest`'s signature and tensor protos."""
        try:
            inputs = {k: tf.make_ndarray(v) for k, v in request.inputs.items()}
        except (TypeError, ValueError) as error:
            raise _bad_request(f"malformed input tensor: {error}") from None
        return self.predict(request.model_spec.signature_name, inputs)

    def predict(self, signature_name, inputs: dict) -> dict:
        """Runs a signature on named inputs (lists or arrays); returns numpy outputs."""
        _, function = self.signature(signature_name)
        specs = function.structured_input_signature[1]
        missing, unknown = sorted(set(specs) - set(inputs)), sorted(set(inputs) - set(specs))
        if missing or unknown:
            raise _bad_request(
                f"inputs must be exactly {sorted(specs)}; missing {missing}, unknown {unknown}"
            )
        tensors = {}
        for name, spec in specs.items():
            try:
                tensor = tf.constant(inputs[name], dtype=spec.dtype)
            except (TypeError, ValueError) as error:
                raise _bad_request(f"input {name!r} is not {spec.dtype.name}: {error}") from None
            if not spec.shape.is_compatible_with(tensor.shape):
                raise _bad_request(
                    f"input {name!r} has shape {tensor.shape.as_list()}, "
                    f"expected {spec.shape.as_list()}"
                )
            tensors[name] = tensor
        with self._slots:
            try:
                outputs = function(**tensors)
            except tf.errors.InvalidArgumentError as error:
                raise _bad_request(error.message) from None
        return {name: value.numpy() for name, value in outputs.items()}


# -- REST ------------------------------------------------------------------------------------


def _from_json(value):
    """JSON values → Python values TensorFlow takes; `{"b64": ...}` → bytes."""
    if isinstance(value, dict):
        if set(value) == {"b64"}:
            try:
                # Line-wrapped base64 (the `base64` tool's, MIME's) is still base64.
                return base64.b64decode("".join(value["b64"].split()), validate=True)
            except (AttributeError, binascii.Error, TypeError, ValueError) as error:
                raise _bad_request(f"invalid base64 {value['b64']!r}: {error}") from None
        raise _bad_request(f"unexpected object {value!r} in a tensor value")
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


def rest_predict(model: ServedModel, body: dict) -> dict:
    """The REST `:predict` semantics: row (`instances`) or columnar (`inputs`) format."""
    if not isinstance(body, dict) or ("instances" in body) == ("inputs" in body):
        raise _bad_request('the request must have exactly one of "instances" or "inputs"')
    signature_name = body.get("signature_name")
    names = model.input_names(signature_name)
    if "instances" in body:
        instances = body["instances"]
        if not isinstance(instances, list) or not instances:
            raise _bad_request('"instances" must be a non-empty list')
        if all(isinstance(i, dict) and set(i) != {"b64"} for i in instances):
            if any(set(i) != set(names) for i in instances):
                raise _bad_request(f"every instance must have exactly the inputs {names}")
            inputs = {k: [_from_json(i[k]) for i in instances] for k in names}
        elif len(names) == 1:
            inputs = {names[0]: _from_json(instances)}
        else:
            raise _bad_request(f"each instance must be an object with the inputs {names}")
        outputs = model.predict(signature_name, inputs)
        if len(outputs) == 1:
            return {"predictions": _to_json(next(iter(outputs.values())))}
        rows = len(next(iter(outputs.values())))
        return {
            "predictions": [{k: _to_json(v[i]) for k, v in outputs.items()} for i in range(rows)]
        }
    columns = body["inputs"]
    if isinstance(columns, dict):
        inputs = {k: _from_json(v) for k, v in columns.items()}
    elif len(names) == 1:
        inputs = {names[0]: _from_json(columns)}
    else:
        raise _bad_request(f'"inputs" must be an object with the inputs {names}')
    outputs = model.predict(signature_name, inputs)
    if len(outputs) == 1:
        return {"outputs": _to_json(next(iter(outputs.values())))}
    return {"outputs": {k: _to_json(v) for k, v in outputs.items()}}


def rest_status(model: ServedModel) -> dict:
    return {
        "model_version_status": [
            {
                "version": str(model.version),
                "state": "AVAILABLE",
                "status": {"error_code": "OK", "error_message": ""},
            }
        ]
    }


def rest_metadata(model: ServedModel) -> dict:
    return {
        "model_spec": {"name": model.name, "signature_name": "", "version": str(model.version)},
        "metadata": {
            "signature_def": json_format.MessageToDict(
                model.signature_def_map, preserving_proto_field_name=True
            )
        },
    }


ROUTE = re.compile(
    r"^/v1/models/(?P<name>[^/:]+)(?:/versions/(?P<version>\d+))?(?P<verb>:predict|/metadata)?$"
)


def _handler(model: ServedModel, max_body_bytes: int):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format, *args):  # route the access log to logging
            logger.debug("%s %s", self.address_string(), format % args)

        def _reply(self, status, payload):
            data = json.dumps(payload).encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _route(self, method):
            match = ROUTE.match(self.path.split("?")[0])
            if not match:
                raise ServingError(HTTPStatus.NOT_FOUND, f"Malformed request: {method} {self.path}")
            model.check(match["name"], match["version"])
            verb = match["verb"]
            if method == "GET" and verb is None:
                return rest_status(model)
            if method == "GET" and verb == "/metadata":
                return rest_metadata(model)
            if method == "POST" and verb == ":predict":
                return rest_predict(model, self._json_body())
            raise ServingError(HTTPStatus.NOT_FOUND, f"Malformed request: {method} {self.path}")

        def _json_body(self):
            header = self.headers.get("Content-Length", "0")
            if not (header.isascii() and header.isdigit()):  # read(-1) waits for the client
                self.close_connection = True
                raise _bad_request(f"Content-Length {header!r} is not a byte count")
            length = int(header)
            if length > max_body_bytes:
                self.close_connection = True  # the unread body must not be taken as a request
                raise ServingError(
                    HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                    f"request body of {length} bytes exceeds the limit of {max_body_bytes}",
                )
            try:
                return json.loads(self.rfile.read(length) or b"null")
            except (json.JSONDecodeError, UnicodeDecodeError) as error:
                raise _bad_request(f"JSON Parse error: {error}") from None

        def _serve(self, method):
            try:
                self._reply(HTTPStatus.OK, self._route(method))
            except ServingError as error:
                self._reply(error.status, {"error": str(error)})
            except Exception as error:  # never let one request take the server down
                logger.exception("request failed")
                self._reply(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": str(error)})

        def do_GET(self):
            self._serve("GET")

        def do_POST(self):
            self._serve("POST")

    return Handler


class _QueueingHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # connections wait in the backlog rather than being refused


# -- gRPC ------------------------------------------------------------------------------------

_GRPC_CODES = {
    HTTPStatus.BAD_REQUEST: grpc.StatusCode.INVALID_ARGUMENT,
    HTTPStatus.NOT_FOUND: grpc.StatusCode.NOT_FOUND,
}


class PredictionService(prediction_service_pb2_grpc.PredictionServiceServicer):
    """`Predict` and `GetModelMetadata` of TF Serving's PredictionService."""

    def __init__(self, model: ServedModel):
        self.model = model

    def _spec(self, response, request):
        response.model_spec.name = self.model.name
        response.model_spec.version.value = self.model.version
        response.model_spec.signature_name = request.model_spec.signature_name

    def _serve(self, request, context, work):
        """Runs `work()` after checking the model spec; a `ServingError` aborts the RPC."""
        spec = request.model_spec
        try:
            self.model.check(spec.name, spec.version.value if spec.HasField("version") else None)
            return work()
        except ServingError as error:
            context.abort(_GRPC_CODES.get(error.status, grpc.StatusCode.UNKNOWN), str(error))

    def Predict(self, request, context):
        outputs = self._serve(request, context, lambda: self.model.predict_request(request))
        response = predict_pb2.PredictResponse()
        self._spec(response, request)
        wanted = set(request.output_filter) or set(outputs)
        for name in wanted & set(outputs):
            response.outputs[name].CopyFrom(tf.make_tensor_proto(outputs[name]))
        return response

    def GetModelMetadata(self, request, context):
        self._serve(request, context, lambda: None)
        if list(request.metadata_field) != ["signature_def"]:
            context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, "metadata_field must be ['signature_def']"
            )
        response = get_model_metadata_pb2.GetModelMetadataResponse()
        self._spec(response, request)
        response.metadata["signature_def"].Pack(self.model.signature_def_map)
        return response


# -- the server --------------------------------------------------------------------------------


class ModelServer:
    """REST and gRPC front ends of one `ServedModel`; port 0 picks a free port.

    Example (not run as a doctest: it binds ports)::

        server = ModelServer(ServedModel("m30k-ende", "saved_models/m30k-ende"), rest_port=8501)
        server.start()   # returns at once; server.stop() ends it
    """

    def __init__(
        self,
        model: ServedModel,
        host="127.0.0.1",
        rest_port=8501,
        grpc_port=8500,
        max_body_bytes=MAX_BODY_BYTES,
        workers=16,
    ):
        self.model = model
        self._http = _QueueingHTTPServer((host, rest_port), _handler(model, max_body_bytes))
        self.rest_port = self._http.server_address[1]
        self._grpc = grpc.server(
            futures.ThreadPoolExecutor(max_workers=workers),
            options=[("grpc.max_receive_message_length", max_body_bytes)],
        )
        prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(
            PredictionService(model), self._grpc
        )
        self.grpc_port = self._grpc.add_insecure_port(f"{host}:{grpc_port}")
        self._thread = threading.Thread(target=self._http.serve_forever, daemon=True)

    def start(self):
        self._grpc.start()
        self._thread.start()
        logger.info(
            "serving %s: REST http://%s:%d/v1/models/%s, gRPC %s:%d",
            self.model.name,
            self._http.server_address[0],
            self.rest_port,
            self.model.name,
            self._http.server_address[0],
            self.grpc_port,
        )
        return self

    def stop(self):
        self._http.shutdown()
        self._http.server_close()
        self._grpc.stop(grace=1).wait()
