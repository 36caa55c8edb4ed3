"""Many models in one server, from TF Serving's model config file: each routed by name over REST
and gRPC, version policies and labels, `GET /v1/models`, metrics and batches kept apart by
model, a config change that adds and removes models without failing a request to another, and
a bad config that keeps the last good one.

The models are the session's tiny export copied to more base paths (no export of their own)."""

import dataclasses
import logging
import shutil
import threading
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest
import tensorflow as tf
from tensorflow_serving.apis import prediction_service_pb2_grpc

from durable_files import write_atomically
from keras_transformer import cli
from keras_transformer.search_settings import SearchSettings
from keras_transformer.server.models.batching import BatchingParameters
from keras_transformer.server.models.lifecycle import ServedModel
from keras_transformer.server.models.model_config import All, Latest, ModelsToServe, Specific
from keras_transformer.server.models.model_manager import ModelManager
from keras_transformer.server.server import ModelServer
from serving_clients import http, predict_request, server_settings
from waiting import wait_until

pytestmark = pytest.mark.slow  # loads several SavedModel versions

CONFIG = """\
model_config_list {{
  config {{
    name: "ende"
    base_path: "{base}/ende"
    model_platform: "tensorflow"
    model_version_policy {{ specific {{ versions: 1 versions: 2 }} }}
    version_labels {{ key: "stable" value: 1 }}
    version_labels {{ key: "canary" value: 2 }}
  }}
  config {{ name: "{second}" base_path: "{base}/{second}" model_platform: "tensorflow" }}
}}
"""


@pytest.fixture(autouse=True)
def _seed():
    """No Keras seeding between these tests (it would drop the translator's tokenizer)."""


@pytest.fixture(scope="module")
def base(exported, tmp_path_factory):
    """Base paths ende/{1,2}, enfr/1, third/1 and gone/1, each a copy of the tiny export."""
    base = tmp_path_factory.mktemp("models")
    for version_dir in ("ende/1", "ende/2", "enfr/1", "third/1", "gone/1"):
        shutil.copytree(exported / "1", base / version_dir)
    return base


def write_config(path, base, second):
    write_atomically(path, lambda p: p.write_text(CONFIG.format(base=base, second=second)))


@pytest.fixture(scope="module")
def server(base):
    config = base / "models.config"
    write_config(config, base, "enfr")
    models = ModelManager.to_serve(ModelsToServe(model_config_file=config))  # as `serve` does
    server = ModelServer(models, server_settings())
    yield server.start()
    server.stop()


def translate(server, name, where=""):
    return http(server, f"/v1/models/{name}{where}:predict", {"instances": ["A dog runs."]})


def grpc_predict(server, name, **spec):
    request = predict_request(name, {"text": tf.make_tensor_proto(["A dog runs."])}, **spec)
    channel = grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}")
    return prediction_service_pb2_grpc.PredictionServiceStub(channel).Predict(request, timeout=120)


def test_each_model_answers_by_name_over_rest_and_grpc(server):
    for name in ("ende", "enfr"):
        status, reply = translate(server, name)
        assert status == 200 and len(reply["predictions"]) == 1
        assert grpc_predict(server, name).outputs["translations"]
    assert [m.name for m in server.models.available()] == ["ende", "enfr"]
    assert server.models.get("ende").serving.version == 2  # the newest, without a version
    assert translate(server, "other")[0] == 404


def test_labels_name_versions_over_rest_and_grpc(server):
    assert grpc_predict(server, "ende", version_label="stable").model_spec.version.value == 1
    assert grpc_predict(server, "ende", version_label="canary").model_spec.version.value == 2
    assert translate(server, "ende", "/labels/canary")[0] == 200
    status, reply = http(server, "/v1/models/ende/labels/stable")
    assert status == 200 and reply["model_version_status"][0]["version"] == "1"
    assert translate(server, "ende", "/labels/beta") == (
        400,
        {"error": "Unrecognized servable version label: beta"},
    )
    status, reply = translate(server, "enfr", "/versions/2")
    assert status == 404 and reply["error"] == "Servable not found for request: Specific(enfr, 2)"


def test_models_endpoint_lists_each_version_with_its_labels(server):
    status, reply = http(server, "/v1/models")
    assert status == 200
    assert [m["name"] for m in reply["models"]] == ["ende", "enfr"]
    ende = reply["models"][0]["versions"]
    assert [(v["version"], v["state"], v["labels"]) for v in ende] == [
        (2, "AVAILABLE", ["canary"]),
        (1, "AVAILABLE", ["stable"]),
    ]
    assert set(ende[0]) == {
        "version",
        "state",
        "labels",
        "weight_bytes",
        "source_language",
        "target_language",
        "target_language_tokens",
        "search",
    }
    assert ende[0]["target_language_tokens"] == {}  # a model of one target
    assert ende[0]["search"] == dataclasses.asdict(SearchSettings())  # §6.1's, as exported


def test_two_models_version_1_never_share_a_batch(server):
    """Each model's first request waits for company; were the key the same, the second
    would fill the first's batch and both would leave the queue."""
    models = ModelManager([server.models.get("ende"), server.models.get("enfr")])
    batching = BatchingParameters(True, max_batch_size=2, batch_timeout_micros=10**8)
    batched = ModelServer(models, server_settings(batching=batching)).start()
    registry = batched.metrics.registry

    def queued(count):
        return registry.get_sample_value("keras_transformer_serving_queue_depth") == count

    try:
        with ThreadPoolExecutor(4) as pool:
            replies = [pool.submit(translate, batched, "ende", "/versions/1")]
            wait_until(lambda: queued(1))
            replies.append(pool.submit(translate, batched, "enfr", "/versions/1"))
            wait_until(lambda: queued(2))
            replies += [
                pool.submit(translate, batched, name, "/versions/1") for name in ("ende", "enfr")
            ]
            assert [reply.result()[0] for reply in replies] == [200] * 4
        for name in ("ende", "enfr"):
            model = {"model": name}
            assert (
                registry.get_sample_value("keras_transformer_serving_batch_size_count", model) == 1
            )
            assert registry.get_sample_value("keras_transformer_serving_batch_size_sum", model) == 2
    finally:
        batched.stop()


def test_a_config_change_adds_and_removes_models_without_failing_a_request(server, base):
    """Requests to ende go on while third is added and gone removed by a change of the file."""
    config = base / "reloaded.config"
    write_config(config, base, "gone")
    ende = server.models.get("ende")
    models = ModelManager([ende, ServedModel("gone", base / "gone")], config, 0.05)
    reloading = ModelServer(models, server_settings()).start()
    answers, failures, stop = [], [], threading.Event()

    def client():
        while not stop.is_set():
            status, reply = translate(reloading, "ende")
            (answers if status == 200 else failures).append((status, reply))

    try:
        with ThreadPoolExecutor(2) as pool:
            clients = [pool.submit(client) for _ in range(2)]
            wait_until(lambda: len(answers) >= 2)
            write_config(config, base, "third")
            wait_until(lambda: [m.name for m in models.all()] == ["ende", "third"])
            seen = len(answers)
            wait_until(lambda: len(answers) >= seen + 2)
            stop.set()
            for running in clients:
                running.result()
        assert failures == [] and len(answers) >= 4
        assert translate(reloading, "third")[0] == 200
        assert translate(reloading, "gone")[0] == 404
        assert models.all()[0] is ende and ende.serving is not None  # shared, left alone
    finally:
        reloading.stop()


def test_a_bad_config_keeps_the_last_good_one(server, base, caplog):
    config = base / "bad.config"
    config.write_text('model_config_list { config {\n name: "ende" base_path: "x"\n nme: 1 } }')
    models = ModelManager([server.models.get("ende")], config)
    with caplog.at_level(logging.ERROR):
        models.poll_config()
        models.poll_config()  # the same reason: not logged again at every poll
    assert f"keeping the last good model config: {config}:3: " in caplog.text
    assert caplog.text.count("keeping the last good model config") == 1
    assert [m.name for m in models.all()] == ["ende"]


def test_serve_refuses_a_bad_config_file_or_both_ways_of_naming_models(base, tmp_path):
    config = tmp_path / "models.config"
    config.write_text('model_config_list {\n config { name: "a" base_path: "a" } }')
    with pytest.raises(SystemExit, match=f"{config}:2: model_platform '' is not served"):
        cli.main(["serve", "--model-config-file", str(config)])
    both = ["--model-config-file", str(config), "--model-name", "a", "--model-base-path", "a"]
    with pytest.raises(SystemExit, match="give it, or model_name and model_base_path, not both"):
        cli.main(["serve", *both])


# Last in the file: it changes the shared model ende's policy, then restores it.
def test_version_policies_serve_what_they_name_and_a_change_applies_in_place(server, base):
    ende = server.models.get("ende")
    (base / "ende" / "3" / "variables").mkdir(parents=True)  # complete, no SavedModel: fails
    (base / "ende" / "3" / "variables" / "variables.index").write_bytes(b"")
    (base / "ende" / "3" / "saved_model.pb").write_bytes(b"not a SavedModel")

    def served():
        return sorted(v for v, s in ende.versions.items() if s.state == "AVAILABLE")

    labels = dict(ende.labels)
    try:
        ende.configure(Latest(2), {})  # 3 fails: the next older ones serve
        assert served() == [1, 2] and ende.versions[3].state == "END"
        ende.configure(Specific((1,)), {"stable": 1})
        assert served() == [1] and ende.versions[2].state == "END"
        assert ende.acquire(label="stable").version == 1
        ende.versions[1].release()
        ende.configure(All(), {})  # 3 waits for its retry; 2 is loaded again
        assert served() == [1, 2] and ende.serving.version == 2
    finally:
        ende.configure(Specific((1, 2)), labels)
