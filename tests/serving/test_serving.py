"""The TF-Serving-compatible endpoint, driven by real clients over loopback: plain HTTP JSON in
both formats, and the official gRPC stub from tensorflow-serving-api; batching, limits, protocol
faults and the graceful drain."""

import asyncio
import base64
import json
import resource
import socket
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest
import tensorflow as tf
from starlette.routing import Route
from tensorflow_serving.apis import (
    get_model_metadata_pb2,
    get_model_status_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
)

from keras_transformer.decoding.translator import load_run
from keras_transformer.search_settings import SearchSettings
from keras_transformer.server.models.batching import BatchingParameters
from keras_transformer.server.models.lifecycle import ServedModel
from keras_transformer.server.models.limits import Limits
from keras_transformer.server.models.model_manager import ModelManager
from keras_transformer.server.server import OTHER_FILES, ModelServer, raise_file_limit
from keras_transformer.server.settings import Network
from serving_clients import http, predict_request, server_settings
from waiting import wait_until

pytestmark = pytest.mark.slow  # exports and serves a model

SENTENCES = ["A dog runs.", "Two men play football in a park.", "A girl is eating.", "People."]
NAME = "m30k-ende"


@pytest.fixture(autouse=True)
def _seed():
    """No Keras seeding between these tests (it would drop the translator's tokenizer)."""


@pytest.fixture(scope="module")
def expected(run_dir):
    return load_run(run_dir).translate(SENTENCES, SearchSettings(beam_size=4, alpha=0.6))


LIMITS = Limits(max_sentences_per_request=8, max_source_length=200)


@pytest.fixture(scope="module")
def model(exported):
    return ServedModel(NAME, exported)


def started(model, limits=LIMITS, batching=BatchingParameters(), **network):
    network = {"max_body_bytes": 64 * 1024, "max_connections": 32} | network
    return ModelServer(ModelManager([model]), server_settings(limits, batching, **network)).start()


@pytest.fixture(scope="module")
def server(model):
    server = started(model, socket_timeout_s=2.0)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def batched_server(model):
    batching = BatchingParameters(True, max_batch_size=8, batch_timeout_micros=200_000)
    server = started(model, batching=batching)
    yield server
    server.stop()


PREDICT = f"/v1/models/{NAME}:predict"


def test_status_and_metadata(server):
    assert http(server, f"/v1/models/{NAME}") == (
        200,
        {
            "model_version_status": [
                {
                    "version": "1",
                    "state": "AVAILABLE",
                    "status": {"error_code": "OK", "error_message": ""},
                }
            ]
        },
    )
    status, metadata = http(server, f"/v1/models/{NAME}/versions/1/metadata")
    assert status == 200 and metadata["model_spec"]["version"] == "1"
    signatures = metadata["metadata"]["signature_def"]["signature_def"]
    assert set(signatures) == {
        "serving_default",
        "translate_options",
        "translate_ids",
        "attention",
        "source_lengths",
    }
    assert signatures["serving_default"]["inputs"]["text"]["dtype"] == "DT_STRING"


def test_row_and_columnar_formats_translate_as_keras(server, expected):
    status, rows = http(server, PREDICT, {"instances": SENTENCES})
    assert status == 200
    assert [row["translations"] for row in rows["predictions"]] == expected
    status, columns = http(
        server, f"/v1/models/{NAME}/versions/1:predict", {"inputs": {"text": SENTENCES}}
    )
    assert status == 200 and columns["outputs"]["translations"] == expected
    encoded = [{"b64": base64.b64encode(s.encode()).decode()} for s in SENTENCES]
    assert http(server, PREDICT, {"instances": encoded})[1] == rows
    wrapped = [{"b64": base64.encodebytes(s.encode() * 3).decode()} for s in SENTENCES[:1]]
    assert "\n" in wrapped[0]["b64"]  # MIME base64: lines of 76 characters
    assert http(server, PREDICT, {"instances": wrapped})[0] == 200


def test_options_signature_takes_scalars_in_columnar_format(server):
    body = {
        "signature_name": "translate_ids",
        "inputs": {"source_ids": [[40, 41, 2]], "beam_size": 2, "alpha": 0.6, "extra_length": 3},
    }
    status, reply = http(server, PREDICT, body)
    assert status == 200 and len(reply["outputs"]["target_ids"][0]) == 6


def ids_request(beam_size=2, extra_length=3, source_ids=((40, 41, 2),), alpha=0.6):
    inputs = {"source_ids": source_ids, "beam_size": beam_size, "alpha": alpha}
    body = {"signature_name": "translate_ids", "inputs": {**inputs, "extra_length": extra_length}}
    return json.dumps(body).encode()


@pytest.mark.parametrize(
    "path, payload, code, message",
    [
        (PREDICT, b"{not json", 400, "JSON Parse error"),
        (PREDICT, json.dumps({"instances": [1, 2]}).encode(), 400, "is not string"),
        (PREDICT, json.dumps({"signature_name": "nope", "instances": ["a"]}).encode(), 400, "nope"),
        (PREDICT, json.dumps({"inputs": {"txt": ["a"]}}).encode(), 400, "unknown ['txt']"),
        (PREDICT, json.dumps({"instances": ["a"], "inputs": ["a"]}).encode(), 400, "exactly one"),
        ("/v1/models/other:predict", json.dumps({"instances": ["a"]}).encode(), 404, "other"),
        (f"/v1/models/{NAME}/versions/7:predict", b'{"instances": ["a"]}', 404, "7"),
        (PREDICT, json.dumps({"instances": ["a" * 70000]}).encode(), 413, "exceeds the limit"),
        (PREDICT, b'{"instances": [{"b64": "abc"}]}', 400, "invalid base64 'abc'"),
        (PREDICT, b'{"instances": [{"b64": 5}]}', 400, "invalid base64 5"),
        (PREDICT, ids_request(beam_size=0), 400, "beam_size 0 is not one of those exported"),
        (PREDICT, ids_request(beam_size=65), 400, "beam_size 65 is not one of those exported"),
        (PREDICT, ids_request(extra_length=-1), 400, "extra_length -1 is not in 0..50"),
        (PREDICT, ids_request(extra_length=10**6), 400, "extra_length 1000000 is not in 0..50"),
        (PREDICT, ids_request(alpha=float("nan")), 400, "alpha nan is not a finite number"),
        (PREDICT, ids_request(source_ids=[[5] * 99 + [2]]), 400, "width 100 is over max_length"),
        (PREDICT, ids_request(beam_size=2.5), 400, "holds 2.5: int32 values of beam_size are"),
        (
            PREDICT,
            json.dumps({"instances": ["a"] * 9}).encode(),
            400,
            "(max_sentences_per_request)",
        ),
        (PREDICT, json.dumps({"instances": ["é" * 101]}).encode(), 400, "202 bytes, over"),
        (PREDICT, ids_request(source_ids=[[2] * 201]), 400, "201 ids, over the limit of 200"),
        (PREDICT, ids_request(source_ids=[[-1, 2]]), 400, "holds -1"),
        (PREDICT, ids_request(source_ids=[[2**31, 2]]), 400, "holds 2147483648"),
        (PREDICT, ids_request(beam_size=2**40), 400, "holds 1099511627776"),
        (PREDICT, b"[" * 30000 + b"]" * 30000, 400, "nested too deeply"),
        (f"/v1/models/{NAME}/versions/0:predict", b'{"instances": ["a"]}', 404, "0"),
        (
            f"/v1/models/{NAME}/labels/stable:predict",
            b'{"instances": ["a"]}',
            400,
            "Unrecognized servable version label: stable",
        ),
        (
            f"/v1/models/{NAME}/versions/{'9' * 5000}:predict",
            b'{"instances": ["a"]}',
            400,
            f"Failed to convert version: {'9' * 20}...(5000 digits) to numeric",
        ),
        (f"/v1/models/{NAME}/versions/{2**63}", None, 400, f"version: {2**63} to numeric"),
    ],
)
def test_bad_requests_get_their_status_and_the_server_keeps_serving(
    server, path, payload, code, message
):
    status, reply = http(server, path, raw=payload)
    assert status == code and message in reply["error"]
    assert http(server, f"/v1/models/{NAME}")[0] == 200


@pytest.mark.parametrize("length", ["-1", "ten"])
def test_a_content_length_that_is_no_byte_count_is_refused_at_once(server, length):
    with socket.create_connection(("127.0.0.1", server.rest_port), timeout=30) as connection:
        connection.sendall(
            f"POST {PREDICT} HTTP/1.1\r\nHost: x\r\nContent-Length: {length}\r\n\r\n".encode()
        )
        reply = connection.makefile("rb").read()  # the server answers and closes
    assert reply.startswith(b"HTTP/1.1 400")  # refused by the HTTP parser, in its words
    assert http(server, f"/v1/models/{NAME}")[0] == 200


def grpc_stub(server):
    channel = grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}")
    return prediction_service_pb2_grpc.PredictionServiceStub(channel)


def test_official_grpc_client_predicts_and_reads_metadata(server, expected):
    stub = grpc_stub(server)
    request = predict_pb2.PredictRequest()
    request.model_spec.name = NAME
    request.model_spec.signature_name = "serving_default"
    request.inputs["text"].CopyFrom(tf.make_tensor_proto(SENTENCES))
    response = stub.Predict(request, timeout=120)
    translations = tf.make_ndarray(response.outputs["translations"])
    assert [t.decode() for t in translations] == expected
    assert response.model_spec.version.value == 1

    metadata_request = get_model_metadata_pb2.GetModelMetadataRequest()
    metadata_request.model_spec.name = NAME
    metadata_request.metadata_field.append("signature_def")
    metadata = stub.GetModelMetadata(metadata_request, timeout=60)
    signature_map = get_model_metadata_pb2.SignatureDefMap()
    metadata.metadata["signature_def"].Unpack(signature_map)
    assert "serving_default" in signature_map.signature_def

    request.model_spec.name = "unknown"
    with pytest.raises(grpc.RpcError) as error:
        stub.Predict(request, timeout=60)
    assert error.value.code() == grpc.StatusCode.NOT_FOUND

    request.model_spec.name = NAME
    request.inputs["text"].tensor_content = b"\x00" * 3  # 3 bytes cannot hold float32s
    request.inputs["text"].dtype = tf.float32.as_datatype_enum
    with pytest.raises(grpc.RpcError) as error:
        stub.Predict(request, timeout=60)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "malformed input tensor" in error.value.details()


def test_sixteen_concurrent_clients_all_answered_correctly(server, expected):
    answers, failures = [], []

    def client(index):
        for request in range(20):
            k = (index + request) % len(SENTENCES)
            status, reply = http(server, PREDICT, {"instances": [SENTENCES[k]]})
            if status != 200:
                failures.append((status, reply))
            else:
                answers.append(reply["predictions"][0]["translations"] == expected[k])

    threads = [threading.Thread(target=client, args=(i,)) for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=600)
    assert not failures and len(answers) == 16 * 20 and all(answers)


def test_answers_under_batching_equal_answers_one_at_a_time(server, batched_server):
    sentences = SENTENCES + ["A man rides a bike.", "Kids.", "A red car.", "Two cats sleep."]
    alone = [http(server, PREDICT, {"instances": [s]})[1]["predictions"][0] for s in sentences]
    start = threading.Barrier(len(sentences))

    def together(sentence):
        start.wait(timeout=60)
        return http(batched_server, PREDICT, {"instances": [sentence]})

    with ThreadPoolExecutor(len(sentences)) as pool:
        replies = list(pool.map(together, sentences))
    assert all(status == 200 for status, _ in replies)
    batched = [reply["predictions"][0] for _, reply in replies]
    assert [b["translations"] for b in batched] == [a["translations"] for a in alone]
    assert [b["scores"] for b in batched] == pytest.approx([a["scores"] for a in alone], rel=1e-5)
    registry = batched_server.metrics.registry
    model = {"model": NAME}
    calls = registry.get_sample_value("keras_transformer_serving_batch_size_count", model)
    rows = registry.get_sample_value("keras_transformer_serving_batch_size_sum", model)
    assert rows == len(sentences) and calls < len(sentences)  # some requests shared a call


def grpc_request(inputs, signature_name="serving_default", **spec):
    return predict_request(NAME, inputs, signature_name, **spec)


def grpc_error(server, request):
    with pytest.raises(grpc.RpcError) as error:
        grpc_stub(server).Predict(request, timeout=60)
    return error.value.code(), error.value.details()


def declared(shape, dtype):
    """A TensorProto that declares `shape` and holds no values."""
    proto = tf.make_tensor_proto([], dtype)
    proto.tensor_shape.Clear()
    for size in shape:
        proto.tensor_shape.dim.add(size=size)
    return proto


def test_grpc_refuses_oversized_shapes_before_building_them(server):
    code, details = grpc_error(server, grpc_request({"text": declared([10**9], tf.string)}))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "1000000000 sentences" in details
    scalar = {name: tf.make_tensor_proto(v) for name, v in [("beam_size", 2), ("extra_length", 3)]}
    inputs = {"source_ids": declared([1, 10**9], tf.int32), "alpha": tf.make_tensor_proto(0.6)}
    code, details = grpc_error(server, grpc_request({**inputs, **scalar}, "translate_ids"))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "(max_source_length)" in details
    inputs["source_ids"] = tf.make_tensor_proto([[5, -3, 2]], tf.int32)
    code, details = grpc_error(server, grpc_request({**inputs, **scalar}, "translate_ids"))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "holds -3" in details


def test_grpc_version_zero_is_not_found_and_an_unknown_label_is_invalid(server):
    text = {"text": tf.make_tensor_proto(["A dog."])}
    assert grpc_error(server, grpc_request(text, version=0))[0] == grpc.StatusCode.NOT_FOUND
    labelled = grpc_request(text, version_label="stable")
    assert grpc_error(server, labelled) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "Unrecognized servable version label: stable",
    )
    assert grpc_stub(server).Predict(grpc_request(text, version=1), timeout=60).outputs


def test_grpc_output_filter_is_honoured(server):
    request = grpc_request({"text": tf.make_tensor_proto(["A dog."])})
    request.output_filter.append("scores")
    assert set(grpc_stub(server).Predict(request, timeout=60).outputs) == {"scores"}
    request.output_filter.append("nope")
    code, details = grpc_error(server, request)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "nope" in details


def test_grpc_model_status_reports_the_version_state(server):
    stub = model_service_pb2_grpc.ModelServiceStub(
        grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}")
    )
    request = get_model_status_pb2.GetModelStatusRequest()
    request.model_spec.name = NAME
    (status,) = stub.GetModelStatus(request, timeout=60).model_version_status
    assert status.version == 1
    assert status.state == get_model_status_pb2.ModelVersionStatus.AVAILABLE


def test_a_second_server_on_the_grpc_port_fails_clearly(model, server):
    with pytest.raises(OSError, match=f"cannot listen for gRPC on 127.0.0.1:{server.grpc_port}"):
        ModelServer(ModelManager([model]), server_settings(grpc_port=server.grpc_port))


def test_a_chunked_body_is_read_as_one_request(server):
    body = json.dumps({"instances": ["A dog runs."]}).encode()
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in (body[:7], body[7:]))
    with socket.create_connection(("127.0.0.1", server.rest_port), timeout=60) as connection:
        connection.sendall(
            f"POST {PREDICT} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
            + chunks
            + b"0\r\n\r\n"
            + f"GET /v1/models/{NAME} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode()
        )
        replies = connection.makefile("rb").read()
    assert replies.count(b"HTTP/1.1 200") == 2 and b"predictions" in replies
    assert b"model_version_status" in replies


def test_a_body_no_route_reads_is_read_before_the_next_request_on_the_connection(server):
    """A GET with a body (as libretranslatepy sends) is answered, and its body is not taken
    for the next request on the same keep-alive connection."""
    with socket.create_connection(("127.0.0.1", server.rest_port), timeout=60) as connection:
        connection.sendall(
            f"GET /v1/models/{NAME} HTTP/1.1\r\nHost: x\r\nContent-Length: 9\r\n\r\n".encode()
            + b"GET /x y\n"
            + f"GET /v1/models/{NAME} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode()
        )
        replies = connection.makefile("rb").read()
    assert replies.count(b"HTTP/1.1 200") == 2 and replies.count(b"model_version_status") == 2


def test_a_stalled_connection_is_closed_and_the_server_keeps_serving(server):
    with socket.create_connection(("127.0.0.1", server.rest_port), timeout=60) as connection:
        connection.sendall(f"POST {PREDICT} HTTP/1.1\r\nContent-Length: 10\r\n\r\n{{".encode())
        reply = connection.makefile("rb").read()  # until the server closes it
    # Answered 408 after its socket timeout, then closed.
    assert reply.startswith(b"HTTP/1.1 408") and b"1 bytes of its body in 2 s" in reply
    assert http(server, f"/v1/models/{NAME}")[0] == 200


@pytest.mark.parametrize("sent", [b"", b"GET /v1/models/m30k-ende HTTP/1.1\r\nHost: x"])
def test_a_connection_silent_or_stalled_in_its_headers_is_closed_after_the_socket_timeout(
    server, sent
):
    with socket.create_connection(("127.0.0.1", server.rest_port), timeout=60) as connection:
        connection.sendall(sent)
        start = time.monotonic()
        assert connection.recv(1024) == b""  # closed, nothing answered
        assert 1.5 < time.monotonic() - start < 30  # the server's 2 s, not the client's 60
    assert http(server, f"/v1/models/{NAME}")[0] == 200


def test_serve_raises_its_open_files_limit_to_what_its_connections_need():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = 2000 + OTHER_FILES  # a socket a connection, and the server's other files
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
        raised = raise_file_limit(Network(max_connections=2000))
        expected = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        assert raised == expected == resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        assert raise_file_limit(Network(max_connections=10)) == expected  # never lowered
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def answers(server) -> bool:
    try:
        return http(server, f"/v1/models/{NAME}")[0] == 200
    except OSError:  # refused: the connections are not closed yet
        return False


def stall(server, count) -> list[socket.socket]:
    """`count` connections each 99 bytes short of its body."""
    stalled = [socket.create_connection(("127.0.0.1", server.rest_port)) for _ in range(count)]
    for connection in stalled:
        connection.sendall(f"POST {PREDICT} HTTP/1.1\r\nContent-Length: 100\r\n\r\n{{".encode())
    return stalled


def idle(server, count) -> list[socket.socket]:
    """`count` keep-alive connections, each answered once and then silent."""
    connections = [socket.create_connection(("127.0.0.1", server.rest_port)) for _ in range(count)]
    for connection in connections:
        connection.sendall(f"GET /v1/models/{NAME} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        connection.settimeout(60)
        assert connection.recv(65536).startswith(b"HTTP/1.1 200")
    return connections


def test_idle_and_stalled_connections_cost_no_thread_and_shut_no_one_out(model):
    # Neither kind times out here: each holds its socket and a coroutine all along.
    server = started(model, max_connections=512, socket_timeout_s=600.0)
    http(server, PREDICT, {"instances": ["A dog."]})  # the worker threads of a request exist
    threads = threading.active_count()
    held = stall(server, 200) + idle(server, 100)
    try:
        served = [http(server, PREDICT, {"instances": ["A dog."]})[0] for _ in range(10)]
        assert served == [200] * 10
        assert threading.active_count() == threads
    finally:
        for connection in held:
            connection.close()
        server.stop()


class HeldApp:
    """An ASGI route's app that answers once the test lets it: `arrived` is released as each
    request comes, then `may_answer` is waited for (in a thread, off the event loop); with
    `body_apart`, the reply's headers are sent first and its body only then."""

    def __init__(self, body_apart=False):
        self.arrived = threading.Semaphore(0)
        self.may_answer = threading.Event()
        self.body_apart = body_apart

    async def __call__(self, scope, receive, send):
        self.arrived.release()
        headers = [(b"content-type", b"application/json"), (b"content-length", b"2")]
        if self.body_apart:
            await send({"type": "http.response.start", "status": 200, "headers": headers})
        await asyncio.to_thread(self.may_answer.wait, 120)
        if not self.body_apart:
            await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"{}"})


def test_a_connection_beyond_the_limit_is_refused_at_once_when_all_are_being_answered(model):
    server = started(model, max_connections=4)
    held = HeldApp()
    server.add_routes([Route("/held", held)])
    try:
        with ThreadPoolExecutor(4) as pool:
            replies = [pool.submit(http, server, "/held") for _ in range(4)]
            for _ in range(4):
                assert held.arrived.acquire(timeout=120)
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(f"http://127.0.0.1:{server.rest_port}/v1/models/{NAME}")
            assert refused.value.code == 503
            held.may_answer.set()
            assert [reply.result()[0] for reply in replies] == [200] * 4
        wait_until(lambda: answers(server))
    finally:
        held.may_answer.set()
        server.stop()


def test_metrics_count_requests_by_status(server):
    http(server, PREDICT, {"instances": ["A dog."]})
    http(server, PREDICT, {"instances": ["a"] * 9})
    request = urllib.request.Request(
        f"http://127.0.0.1:{server.rest_port}/monitoring/prometheus/metrics"
    )
    with urllib.request.urlopen(request, timeout=60) as reply:
        text = reply.read().decode()
    ok = f'keras_transformer_serving_requests_total{{api="rest",model="{NAME}",status="OK"}}'
    assert ok in text
    assert f'{{api="rest",model="{NAME}",status="INVALID_ARGUMENT"}}' in text
    assert f'keras_transformer_serving_model_weight_bytes{{model="{NAME}",version="1"}}' in text
    assert "keras_transformer_serving_queue_depth" in text


def test_drain_answers_the_requests_in_flight_then_stops(model):
    # Batches wait up to 100 s for company: the requests are surely queued when the drain comes.
    server = started(model, batching=BatchingParameters(True, 64, batch_timeout_micros=10**8))
    registry = server.metrics.registry
    with ThreadPoolExecutor(3) as pool:
        replies = [pool.submit(http, server, PREDICT, {"instances": [s]}) for s in SENTENCES[:3]]
        wait_until(lambda: registry.get_sample_value("keras_transformer_serving_queue_depth") == 3)
        server.drain(timeout=120)
        assert [r.result()[0] for r in replies] == [200, 200, 200]
    with pytest.raises(urllib.error.URLError):
        http(server, f"/v1/models/{NAME}")


def test_drain_waits_for_a_reply_still_being_written(model):
    # The reply stops between its headers and its body: a process that ended when the drain
    # returned would cut it there.
    server = started(model)
    held = HeldApp(body_apart=True)
    server.add_routes([Route("/held", held)])
    with ThreadPoolExecutor(2) as pool:
        reply = pool.submit(http, server, "/held")
        assert held.arrived.acquire(timeout=120)
        drain = pool.submit(server.drain, 120)
        with pytest.raises(TimeoutError):
            drain.result(timeout=2)
        held.may_answer.set()
        assert reply.result()[0] == 200
        drain.result(timeout=120)
