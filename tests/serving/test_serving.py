"""The TF-Serving-compatible endpoint, driven by real clients over loopback: plain HTTP JSON in
both formats, and the official gRPC stub from tensorflow-serving-api."""

import base64
import json
import socket
import threading
import urllib.error
import urllib.request

import grpc
import pytest
import tensorflow as tf
from tensorflow_serving.apis import (
    get_model_metadata_pb2,
    predict_pb2,
    prediction_service_pb2_grpc,
)

from keras_transformer.decoding.translator import load_run
from keras_transformer.serving.server import ModelServer, ServedModel

pytestmark = pytest.mark.slow  # exports and serves a model

SENTENCES = ["A dog runs.", "Two men play football in a park.", "A girl is eating.", "People."]
NAME = "m30k-ende"


@pytest.fixture(autouse=True)
def _seed():
    """No Keras seeding between these tests (it would drop the translator's tokenizer)."""


@pytest.fixture(scope="module")
def expected(run_dir):
    return load_run(run_dir).translate(SENTENCES, beam_size=4, alpha=0.6)


@pytest.fixture(scope="module")
def server(exported):
    server = ModelServer(
        ServedModel(NAME, exported), rest_port=0, grpc_port=0, max_body_bytes=64 * 1024
    ).start()
    yield server
    server.stop()


def http(server, path, body=None, raw=None):
    """(status, JSON reply) of a GET (no body) or POST to the REST port."""
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    request = urllib.request.Request(f"http://127.0.0.1:{server.rest_port}{path}", data=data)
    try:
        with urllib.request.urlopen(request, timeout=120) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


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
    assert set(signatures) == {"serving_default", "translate_options", "translate_ids"}
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


def ids_request(beam_size=2, extra_length=3):
    inputs = {"source_ids": [[40, 41, 2]], "beam_size": beam_size, "alpha": 0.6}
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
    assert reply.startswith(b"HTTP/1.1 400") and b"is not a byte count" in reply
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
