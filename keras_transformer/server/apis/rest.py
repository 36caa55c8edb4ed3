"""TensorFlow Serving's REST API over a `ModelServer`'s dispatch, as routes of the server's ASGI
application:

- `GET /v1/models/NAME[/versions/V | /labels/L]`: each version's state (LOADING, AVAILABLE,
  UNLOADING, END);
- `GET .../metadata`: the SignatureDefMap;
- `POST .../NAME[/versions/V]:predict`: the row format (`"instances"` → `"predictions"`) or the
  columnar format (`"inputs"` → `"outputs"`) and `"signature_name"`; strings may be given as
  `{"b64": ...}`;
- `GET /monitoring/prometheus/metrics`: the Prometheus metrics;
- `GET /v1/models` (ours, not TF Serving's): every model and version, with its state, labels,
  weight bytes and languages.

A version label (`/labels/L`) is one of the model config's `version_labels`. Errors are
`{"error": "..."}` with the status of `errors.ServingError`; a version in the path is an int64,
as in TF Serving; another path or method is 404 "Malformed request", as TF Serving answers it.
A body is read within its limits (`http.read_body`), then parsed and computed in the server's
worker threads, off the event loop.
"""

import base64
import binascii
import json

import numpy as np
from google.protobuf import json_format
from starlette.convertors import Convertor, register_url_convertor
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from keras_transformer.server.apis.http import answered, json_reply, read_body
from keras_transformer.server.errors import bad_request
from keras_transformer.server.models.metrics import METRICS_PATH

MODELS_PATH = "/v1/models"
INT64_MAX = 2**63 - 1


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
    version's state, labels, weight bytes, languages (a multilingual model's target tokens
    too) and `serving_default`'s search (null for an export that does not record it)."""
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
        "search": info.get("search"),
    }


def _version(text: str | None) -> int | None:
    """The path's version: an int64, as TF Serving's; a longer number is refused before Python
    converts it (past 4,300 digits its conversion raises)."""
    if text is None:
        return None
    digits = text.lstrip("0") or "0"
    if len(digits) > len(str(INT64_MAX)) or int(digits) > INT64_MAX:
        shown = text if len(text) <= 40 else f"{text[:20]}...({len(text)} digits)"
        raise bad_request(f"Failed to convert version: {shown} to numeric.")
    return int(digits)


class _Name(Convertor):
    """A model name or version label in a path: anything but "/" and ":"."""

    regex = "[^/:]+"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


class _Digits(_Name):
    """A version in a path: digits, converted by `_version` (an int64, or refused in words)."""

    regex = "[0-9]+"


def malformed(request: Request, exc=None) -> Response:
    """TF Serving's answer to a path or method it has no route for."""
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return json_reply({"error": f"Malformed request: {request.method} {target}"}, 404)


class TfServingRest:
    """TF Serving's REST API over `server` (a `ModelServer`): `routes()` for the application."""

    def __init__(self, server):
        self.server = server
        register_url_convertor("model", _Name())
        register_url_convertor("version", _Digits())

    def routes(self) -> list[Route]:
        model = "/v1/models/{name:model}"
        found = [
            Route(MODELS_PATH, answered(self.models), methods=["GET"]),
            Route(MODELS_PATH + "/", answered(self.models), methods=["GET"]),
            Route(METRICS_PATH, answered(self.metrics), methods=["GET"]),
        ]
        for servable in ("", "/versions/{version:version}", "/labels/{label:model}"):
            found += [
                Route(model + servable, answered(self.status), methods=["GET"]),
                Route(model + servable + "/metadata", answered(self.metadata), methods=["GET"]),
                Route(model + servable + ":predict", answered(self.predict), methods=["POST"]),
            ]
        return found

    @staticmethod
    def _servable(request: Request) -> tuple:
        params = request.path_params
        return params["name"], _version(params.get("version")), params.get("label")

    async def models(self, request: Request) -> Response:
        return json_reply(models_reply(self.server.models.all()))

    async def metrics(self, request: Request) -> Response:
        exposition = await self.server.call(self.server.metrics.exposition)
        return Response(exposition, media_type="text/plain; version=0.0.4")

    async def status(self, request: Request) -> Response:
        servables = self.server.status_servables(*self._servable(request))
        return json_reply(status_reply(servables))

    async def metadata(self, request: Request) -> Response:
        servable = self.server.metadata_servable(*self._servable(request))
        return json_reply(await self.server.call(metadata_reply, servable))

    async def predict(self, request: Request) -> Response:
        network = self.server.settings.network
        body = await read_body(request, network.max_body_bytes, network.socket_timeout_s)
        servable = self._servable(request)
        return json_reply(await self.server.call(self._predict, servable, body))

    def _predict(self, servable: tuple, data: bytes) -> dict:
        """A `:predict` reply, in a worker thread: the body parsed, checked and computed."""
        body = _json_body(data)
        signature_name = body.get("signature_name") if isinstance(body, dict) else None
        rows = []

        def arrays(loaded, signature):
            names = sorted(loaded.input_specs(signature))
            row_format, inputs = predict_inputs(body, names)
            rows.append(row_format)
            return loaded.arrays(signature, inputs, self.server.limits)

        outputs = self.server.predict(
            "rest", *servable, signature_name, arrays, deadline=self.server.rest_deadline()
        )
        return predict_reply(rows[0], outputs)


def _json_body(data: bytes):
    try:
        return json.loads(data or b"null")
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise bad_request(f"JSON Parse error: {error}") from None
    except RecursionError:
        raise bad_request("JSON Parse error: nested too deeply") from None
