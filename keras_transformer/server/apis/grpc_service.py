"""TensorFlow Serving's gRPC API over a `ModelServer`'s dispatch: `PredictionService`'s
`Predict` and `GetModelMetadata`, and `ModelService`'s `GetModelStatus`, through the servicer
base classes of the official `tensorflow-serving-api` package, so that its client stubs work.

A request's deadline is its RPC's; a client that cancels or goes away takes its request out of
the queue. A `version_label` is one of the model config's `version_labels` (another is
INVALID_ARGUMENT, as in TF Serving); a version not served is NOT_FOUND.
"""

import time

import grpc
import tensorflow as tf
from tensorflow_serving.apis import (
    get_model_metadata_pb2,
    get_model_status_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
)

from keras_transformer.server.errors import ServingError, bad_request

_STATES = get_model_status_pb2.ModelVersionStatus.State


def _version(spec):
    return spec.version.value if spec.HasField("version") else None


def _label(spec):
    return spec.version_label if spec.HasField("version_label") else None


def _deadline(context):
    remaining = context.time_remaining()
    return None if remaining is None else time.monotonic() + remaining


def _answer(context, work):
    """`work()`'s reply, or the RPC aborted with the `ServingError`'s code."""
    try:
        return work()
    except ServingError as error:
        context.abort(error.code, str(error))


class PredictionService(prediction_service_pb2_grpc.PredictionServiceServicer):
    def __init__(self, server):
        self.server = server

    def Predict(self, request, context):
        return _answer(context, lambda: self._predict(request, context))

    def _predict(self, request, context):
        spec = request.model_spec
        servable_seen = []

        def arrays(servable, signature):
            unknown = sorted(set(request.output_filter) - set(servable.output_names(signature)))
            if unknown:
                raise bad_request(
                    f"output_filter names {unknown}, not outputs of signature {signature!r}: "
                    f"{servable.output_names(signature)}"
                )
            servable_seen.append(servable)
            return servable.arrays_from_protos(signature, request.inputs, self.server.limits)

        outputs = self.server.predict(
            "grpc",
            spec.name,
            _version(spec),
            _label(spec),
            spec.signature_name,
            arrays,
            deadline=_deadline(context),
            on_cancel=lambda cancel: context.add_callback(cancel),
        )
        response = predict_pb2.PredictResponse()
        response.model_spec.name = spec.name
        response.model_spec.version.value = servable_seen[0].version
        response.model_spec.signature_name = spec.signature_name
        for name in set(request.output_filter) or set(outputs):
            response.outputs[name].CopyFrom(tf.make_tensor_proto(outputs[name]))
        return response

    def GetModelMetadata(self, request, context):
        return _answer(context, lambda: self._metadata(request))

    def _metadata(self, request):
        if list(request.metadata_field) != ["signature_def"]:
            raise bad_request("metadata_field must be ['signature_def']")
        spec = request.model_spec
        servable = self.server.metadata_servable(spec.name, _version(spec), _label(spec))
        response = get_model_metadata_pb2.GetModelMetadataResponse()
        response.model_spec.name = spec.name
        response.model_spec.version.value = servable.version
        response.metadata["signature_def"].Pack(servable.signature_def_map)
        return response


class ModelService(model_service_pb2_grpc.ModelServiceServicer):
    def __init__(self, server):
        self.server = server

    def GetModelStatus(self, request, context):
        return _answer(context, lambda: self._status(request))

    def _status(self, request):
        spec = request.model_spec
        response = get_model_status_pb2.GetModelStatusResponse()
        for servable in self.server.status_servables(spec.name, _version(spec), _label(spec)):
            entry = response.model_version_status.add(
                version=servable.version, state=_STATES.Value(servable.state)
            )
            entry.status.error_code = grpc.StatusCode.UNKNOWN.value[0] if servable.error else 0
            entry.status.error_message = servable.error
        return response


def add_services(server, grpc_server):
    prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(
        PredictionService(server), grpc_server
    )
    model_service_pb2_grpc.add_ModelServiceServicer_to_server(ModelService(server), grpc_server)
