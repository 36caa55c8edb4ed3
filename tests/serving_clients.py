"""Clients of a test's `ModelServer`: plain HTTP on its REST port, and gRPC `PredictRequest`s;
and the settings of a test's server."""

import json
import urllib.error
import urllib.request

from tensorflow_serving.apis import predict_pb2

from keras_transformer.server.models.batching import BatchingParameters
from keras_transformer.server.models.limits import Limits
from keras_transformer.server.settings import Network, ServerSettings


def server_settings(limits=Limits(), batching=BatchingParameters(), **network) -> ServerSettings:
    """A test server's settings: any free ports, and the limits, batching and `network` fields
    given."""
    network = {"rest_port": 0, "grpc_port": 0} | network
    return ServerSettings(network=Network(**network), limits=limits, batching=batching)


def http(server, path, body=None, raw=None):
    """(status, JSON reply) of a GET (no body) or a POST of `body` as JSON (or `raw` bytes)."""
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    request = urllib.request.Request(f"http://127.0.0.1:{server.rest_port}{path}", data=data)
    try:
        with urllib.request.urlopen(request, timeout=120) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def predict_outputs(server, model, signature_name, inputs) -> dict:
    """The columnar `outputs` of `model`'s `signature_name` for `inputs` over TF Serving's REST
    API, as any client asks them; fails on any status but 200."""
    body = {"signature_name": signature_name, "inputs": inputs}
    status, reply = http(server, f"/v1/models/{model}:predict", body)
    assert status == 200, reply
    return reply["outputs"]


def predict_request(model, inputs, signature_name="serving_default", **spec):
    """A `PredictRequest` to `model` of `inputs` (TensorProtos by name); `spec` sets the model
    spec's `version` or `version_label`."""
    request = predict_pb2.PredictRequest()
    request.model_spec.name = model
    request.model_spec.signature_name = signature_name
    for field, value in spec.items():
        if field == "version":
            request.model_spec.version.value = value
        else:
            setattr(request.model_spec, field, value)
    for name, value in inputs.items():
        request.inputs[name].CopyFrom(value)
    return request
