"""LibreTranslate's rate limits shared by replicas through Redis: a real `redis-server` (Debian's
package; `.ci/run` installs it) started on a free port, and two `keras-transformer serve`
processes counting one client's requests in it; and a storage that cannot be reached, refused
by name before anything is served."""

import json
import re
import shutil
import socket
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from keras_transformer.errors import ConfigError
from keras_transformer.server.apis.api_keys import RateLimits
from repo_paths import REPO_ROOT
from waiting import wait_until

REDIS_SERVER = shutil.which("redis-server")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_a_storage_that_cannot_be_reached_is_named():
    url = f"redis://127.0.0.1:{free_port()}"  # nothing listens there
    with pytest.raises(ConfigError, match=f"rate_limit_storage {url} cannot be reached"):
        RateLimits(url)
    with pytest.raises(ConfigError, match="rate_limit_storage 'nowhere://x' cannot be used"):
        RateLimits("nowhere://x")


@pytest.fixture
def redis_url():
    if REDIS_SERVER is None:
        pytest.fail("redis-server is missing (Debian's redis-server package; .ci/run installs it)")
    port = free_port()
    command = [REDIS_SERVER, "--port", str(port), "--save", "", "--appendonly", "no"]
    redis = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    try:
        wait_until(lambda: _listens(port))
        yield f"redis://127.0.0.1:{port}"
    finally:
        redis.terminate()
        redis.wait(timeout=60)


def _listens(port) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def serve(exported, *flags) -> subprocess.Popen:
    command = [sys.executable, "-m", "keras_transformer", "serve", "--model-name", "m30k-ende"]
    command += ["--model-base-path", str(exported), "--rest-port", "0", "--grpc-port", "0"]
    command += ["--no-ui", *flags]
    return subprocess.Popen(
        command, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def detect(port) -> int:
    body = json.dumps({"q": "A dog runs."}).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/detect", body, {"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as reply:
            return reply.status
    except urllib.error.HTTPError as error:
        return error.code


@pytest.mark.slow  # two server processes
def test_two_replicas_with_one_redis_enforce_one_limit(exported, redis_url):
    flags = ["--req-limit", "3", "--rate-limit-storage", redis_url]
    replicas = [serve(exported, *flags) for _ in range(2)]
    try:
        ports = [re.search(r":(\d+)/v1/models", r.stdout.readline())[1] for r in replicas]
        # One client, its requests spread over both: three a minute in all, not three each.
        statuses = [detect(ports[index % 2]) for index in range(5)]
        assert statuses == [200, 200, 200, 429, 429]
    finally:
        for replica in replicas:
            replica.terminate()
            replica.wait(timeout=120)


@pytest.mark.slow  # starts `keras-transformer serve`
def test_serve_without_its_redis_stops_naming_the_url(exported):
    url = f"redis://127.0.0.1:{free_port()}"
    server = serve(exported, "--rate-limit-storage", url)
    _, errors = server.communicate(timeout=300)
    assert server.returncode == 2
    assert f"rate_limit_storage {url} cannot be reached" in errors.splitlines()[-1]
