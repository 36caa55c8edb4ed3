"""Why a request is not served, as one error that maps to both an HTTP status and a gRPC code,
for every API of the server: TF Serving's REST and gRPC, and LibreTranslate's.

The pairs are TensorFlow Serving's, except that a full queue answers 503 over REST (a client's
retry policy treats it as "try again", as it does gRPC's RESOURCE_EXHAUSTED). LibreTranslate's
refusals add 403 (an unknown API key) and 429 (over a rate limit); a document's 415 (a format
not translated, or one that is not what its name says).
"""

from http import HTTPStatus

import grpc

from keras_transformer.errors import KerasTransformerError


class ServingError(KerasTransformerError):
    """A request that cannot be served: `status` over REST, `code` over gRPC."""

    def __init__(self, status: HTTPStatus, code: grpc.StatusCode, message: str):
        super().__init__(message)
        self.status = status
        self.code = code


def bad_request(message) -> ServingError:
    return ServingError(HTTPStatus.BAD_REQUEST, grpc.StatusCode.INVALID_ARGUMENT, message)


def not_found(message) -> ServingError:
    return ServingError(HTTPStatus.NOT_FOUND, grpc.StatusCode.NOT_FOUND, message)


def unavailable(message) -> ServingError:
    return ServingError(HTTPStatus.SERVICE_UNAVAILABLE, grpc.StatusCode.UNAVAILABLE, message)


def queue_full(message) -> ServingError:
    return ServingError(HTTPStatus.SERVICE_UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED, message)


def deadline_exceeded(message) -> ServingError:
    return ServingError(HTTPStatus.GATEWAY_TIMEOUT, grpc.StatusCode.DEADLINE_EXCEEDED, message)


def cancelled(message) -> ServingError:
    return ServingError(HTTPStatus.GATEWAY_TIMEOUT, grpc.StatusCode.CANCELLED, message)


def too_large(message) -> ServingError:
    return ServingError(
        HTTPStatus.REQUEST_ENTITY_TOO_LARGE, grpc.StatusCode.INVALID_ARGUMENT, message
    )


def forbidden(message) -> ServingError:
    return ServingError(HTTPStatus.FORBIDDEN, grpc.StatusCode.PERMISSION_DENIED, message)


def too_many_requests(message) -> ServingError:
    return ServingError(HTTPStatus.TOO_MANY_REQUESTS, grpc.StatusCode.RESOURCE_EXHAUSTED, message)


def unsupported_media_type(message) -> ServingError:
    return ServingError(
        HTTPStatus.UNSUPPORTED_MEDIA_TYPE, grpc.StatusCode.INVALID_ARGUMENT, message
    )
