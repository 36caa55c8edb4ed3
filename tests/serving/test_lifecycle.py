"""TensorFlow Serving's model lifecycle over a base path: version directories, a new version
hot-swapped in while a request holds the old one, a corrupt or half-copied version skipped
while the previous keeps serving, the states the status APIs report, and `serve`'s drain on
SIGTERM."""

import json
import logging
import re
import shutil
import signal
import subprocess
import sys
import threading
import types
import urllib.request

import pytest

from keras_transformer import cli
from keras_transformer.server.models import lifecycle
from keras_transformer.server.models.lifecycle import ServedModel, version_directories
from keras_transformer.server.models.model_manager import ModelManager
from keras_transformer.server.server import ModelServer
from repo_paths import REPO_ROOT
from serving_clients import server_settings
from waiting import wait_until

NAME = "m30k-ende"


@pytest.fixture(autouse=True)
def _seed():
    """No Keras seeding between these tests (it would drop the translator's tokenizer)."""


def test_version_directories_are_read_as_integers(tmp_path, caplog):
    for name in ("1", "0002", "3", "03", "x", "1.5", "٣"):
        (tmp_path / name).mkdir()
    (tmp_path / "7").write_text("a file, not a version")
    with caplog.at_level(logging.WARNING):
        found = version_directories(tmp_path)
    assert found == {1: tmp_path / "1", 2: tmp_path / "0002"}
    assert "directories 03, 3 name the same version" in caplog.text


def test_serve_without_a_version_directory_is_one_clear_error(tmp_path):
    (tmp_path / "not-a-version").mkdir()
    with pytest.raises(SystemExit, match=f"no version directory under {tmp_path}") as stop:
        cli.main(["serve", "--model-name", NAME, "--model-base-path", str(tmp_path)])
    assert "\n" not in str(stop.value)


def corrupt(version_dir):
    (version_dir / "variables").mkdir(parents=True)
    (version_dir / "variables" / "variables.index").write_bytes(b"")
    (version_dir / "saved_model.pb").write_bytes(b"not a SavedModel")


def http_json(server, path):
    with urllib.request.urlopen(f"http://127.0.0.1:{server.rest_port}{path}", timeout=60) as r:
        return json.loads(r.read())


@pytest.mark.slow  # loads three SavedModel versions
def test_versions_swap_in_and_a_corrupt_one_leaves_the_previous_serving(exported, tmp_path, caplog):
    base = tmp_path / NAME
    shutil.copytree(exported / "1", base / "1")
    model = ServedModel(NAME, base)
    server = ModelServer(ModelManager([model]), server_settings()).start()
    try:
        corrupt(base / "2")
        (base / "3").mkdir()  # half-copied: nothing in it yet
        with caplog.at_level(logging.WARNING):
            model.poll()
        assert "skipping version 3 of m30k-ende: no saved_model.pb" in caplog.text
        assert model.version == 1 and 3 not in model.versions
        states = http_json(server, f"/v1/models/{NAME}")["model_version_status"]
        assert [(s["version"], s["state"]) for s in states] == [("2", "END"), ("1", "AVAILABLE")]
        assert (
            states[0]["status"]["error_code"] == "UNKNOWN" and states[0]["status"]["error_message"]
        )

        held = model.acquire()  # a request in flight on version 1
        shutil.copytree(exported / "1", base / "4")
        swap = threading.Thread(target=model.poll)
        swap.start()
        wait_until(lambda: model.versions.get(4) and model.versions[4].state == "AVAILABLE")
        wait_until(lambda: model.versions[1].state == "UNLOADING")
        assert (
            http_json(server, f"/v1/models/{NAME}/versions/1")["model_version_status"][0]["state"]
            == "UNLOADING"
        )
        reply = server.predict(
            "rest",
            NAME,
            None,
            None,
            None,
            lambda s, n: s.arrays(n, {"text": ["A dog."]}, server.limits),
        )
        assert len(reply["translations"]) == 1
        assert model.acquire().version == 4  # new requests go to the new version
        held.run("serving_default", {"text": [b"A dog."]})  # the held one is still answered
        held.release()
        swap.join(timeout=120)
        assert model.versions[1].state == "END"
        model.versions[4].release()
    finally:
        server.stop()


@pytest.mark.slow  # loads two SavedModel versions
def test_a_version_copied_in_two_steps_is_retried_with_backoff(
    exported, tmp_path, monkeypatch, caplog
):
    now = [0.0]
    monkeypatch.setattr(lifecycle, "time", types.SimpleNamespace(monotonic=lambda: now[0]))
    base = tmp_path / NAME
    shutil.copytree(exported / "1", base / "1")
    model = ServedModel(NAME, base, max_load_retries=2, retry_interval_s=10.0)
    # The first step of the copy: every file is there, the variables' data only in part.
    shutil.copytree(exported / "1", base / "2")
    [data] = (base / "2" / "variables").glob("variables.data-*")
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])

    model.poll()
    assert model.version == 1 and model.versions[2].state == "END" and model.versions[2].error
    failed = model.versions[2]
    now[0] = 9.0  # before the backoff's end: not tried again
    model.poll()
    assert model.versions[2] is failed
    now[0] = 10.0  # tried again, failing again: the next try waits twice as long
    model.poll()
    assert model.versions[2] is not failed and model.versions[2].state == "END"
    failed = model.versions[2]
    now[0] = 29.0
    model.poll()
    assert model.versions[2] is failed

    shutil.copyfile(next((exported / "1" / "variables").glob("variables.data-*")), data)
    now[0] = 30.0  # the second step of the copy is done: the retry loads it
    model.poll()
    assert model.version == 2 and model.versions[2].state == "AVAILABLE"
    assert model.versions[1].state == "END"

    corrupt(base / "3")  # a version that never loads is given up after its retries
    for now[0] in (30.0, 40.0, 60.0):
        model.poll()
    assert "giving up after 3 loads" in caplog.text
    failed = model.versions[3]
    now[0] = 1e9
    model.poll()
    assert model.versions[3] is failed and model.version == 2


@pytest.mark.slow  # starts `keras-transformer serve` in a process of its own
def test_sigterm_drains_the_requests_in_flight(exported):
    command = [sys.executable, "-m", "keras_transformer", "serve", "--model-name", NAME]
    command += ["--model-base-path", str(exported), "--rest-port", "0", "--grpc-port", "0"]
    # Batches wait 60 s for company: the requests are surely queued when SIGTERM comes.
    command += ["--enable-batching", "--batch-timeout-micros", "60000000"]
    server = subprocess.Popen(command, cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True)
    try:
        port = re.search(r":(\d+)/v1/models", server.stdout.readline())[1]
        url = f"http://127.0.0.1:{port}"
        with urllib.request.urlopen(f"{url}/", timeout=60) as page:  # the web page, unless --no-ui
            assert page.headers["Content-Type"] == "text/html; charset=utf-8"
        replies = []

        def predict():
            body = json.dumps({"instances": ["A dog runs."]}).encode()
            with urllib.request.urlopen(f"{url}/v1/models/{NAME}:predict", body, timeout=120) as r:
                replies.append((r.status, json.loads(r.read())))

        clients = [threading.Thread(target=predict) for _ in range(2)]
        for client in clients:
            client.start()

        def queued():
            with urllib.request.urlopen(f"{url}/monitoring/prometheus/metrics", timeout=60) as r:
                return "keras_transformer_serving_queue_depth 2.0" in r.read().decode()

        wait_until(queued)
        server.send_signal(signal.SIGTERM)
        for client in clients:
            client.join(timeout=120)
        assert [status for status, _ in replies] == [200, 200]
        assert server.wait(timeout=120) == 0
    finally:
        server.kill()
        server.wait()
