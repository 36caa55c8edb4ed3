"""What the HTTP APIs share on the ASGI application: a request body read within its limits, a
multipart form parsed, JSON replies, and refusals (`ServingError`) answered as `{"error": ...}`
with their status.

The server (uvicorn) frames requests; a body is read here as it streams in, so that one larger
than `max_body_bytes` is refused (413) as soon as its declared length or its bytes say so, and a
client that stalls mid-body is answered 408 after `socket_timeout_s`, costing a coroutine, not a
thread, meanwhile. Both refusals close the connection: the rest of the body is never read.
"""

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from http import HTTPStatus

import grpc
from starlette.formparsers import MultiPartException, MultiPartParser
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from keras_transformer.server.errors import ServingError, bad_request, too_large

logger = logging.getLogger(__name__)

Endpoint = Callable[[Request], Awaitable[Response]]


def json_reply(value, status=HTTPStatus.OK, headers=None) -> Response:
    """`value` as JSON (`json.dumps`'s, so a score of -inf reads `-Infinity` as before)."""
    return Response(json.dumps(value), status, headers, media_type="application/json")


def error_reply(error: ServingError, headers=None) -> Response:
    """A refusal's `{"error": ...}`; one that leaves a body unread also closes the connection."""
    closing = error.status in (HTTPStatus.REQUEST_ENTITY_TOO_LARGE, HTTPStatus.REQUEST_TIMEOUT)
    headers = {**(headers or {}), **({"Connection": "close"} if closing else {})}
    return json_reply({"error": str(error)}, error.status, headers)


def request_timeout(message) -> ServingError:
    return ServingError(HTTPStatus.REQUEST_TIMEOUT, grpc.StatusCode.DEADLINE_EXCEEDED, message)


async def read_body(request: Request, max_body_bytes: int, socket_timeout_s: float) -> bytes:
    """The request's body, refused beyond `max_body_bytes` before it is read whole (413), or
    when its client stalls for `socket_timeout_s` (408)."""
    declared = request.headers.get("content-length")
    if declared is not None and int(declared) > max_body_bytes:
        raise _too_large(int(declared), max_body_bytes)
    body = bytearray()
    try:
        async with asyncio.timeout(socket_timeout_s):
            async for chunk in request.stream():
                body += chunk
                if len(body) > max_body_bytes:
                    raise _too_large(len(body), max_body_bytes)
    except TimeoutError:
        raise request_timeout(
            f"the client sent {len(body)} bytes of its body in {socket_timeout_s:g} s"
        ) from None
    return bytes(body)


MALFORMED_MULTIPART = "Invalid request: malformed multipart/form-data body"


async def multipart_form(headers, body: bytes, max_files: int):
    """A multipart/form-data body (RFC 7578) parsed by python-multipart, with at most
    `max_files` files (a form whose files Starlette spools to temporary files, named by
    Python's `tempfile`). A body with no part at all is malformed."""

    async def stream():
        yield body

    try:
        form = await MultiPartParser(headers, stream(), max_files=max_files).parse()
    except MultiPartException as error:
        raise bad_request(f"{MALFORMED_MULTIPART} ({error})") from None
    if not form:
        raise bad_request(f"{MALFORMED_MULTIPART} (no part)")
    return form


def _too_large(size, limit) -> ServingError:
    return too_large(f"request body of {size} bytes exceeds the limit of {limit}")


def answered(endpoint: Endpoint, internal_error=str, headers=None) -> Endpoint:
    """`endpoint` with its refusals answered: a `ServingError` with its status, input nested
    too deeply 400, any other error 500 with `internal_error(error)` (logged); `headers` on
    every error reply. A client gone mid-body is answered nothing worth sending."""

    async def answer(request: Request) -> Response:
        try:
            return await endpoint(request)
        except ServingError as error:
            return error_reply(error, headers)
        except RecursionError:
            return json_reply({"error": "input nested too deeply"}, HTTPStatus.BAD_REQUEST, headers)
        except ClientDisconnect:
            return Response(status_code=HTTPStatus.BAD_REQUEST)
        except Exception as error:  # never let one request take the server down
            logger.exception("request %s %s failed", request.method, request.url.path)
            status = HTTPStatus.INTERNAL_SERVER_ERROR
            return json_reply({"error": internal_error(error)}, status, headers)

    return answer
