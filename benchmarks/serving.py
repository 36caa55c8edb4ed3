"""Load and fault probes on `keras-transformer serve`: batching off against on, REST and gRPC.

Table: docs/PERFORMANCE.md#serving (load and fault probes).

Each server is `keras-transformer serve` in a process of its own over `--model-base-path` (its
peak resident memory is read from /proc at the end). `--part load`: for batching off, then on,
`--clients` concurrent clients × `--requests` `:predict` requests each (one real Multi30k test
sentence a request, `serving_default`: beam 4, α 0.6) over REST, then the same over gRPC with
the official `tensorflow-serving-api` stub, after one warm-up request per sentence; one JSON
line per API and mode: requests/s, p50/p99 latency, errors, peak RSS. `--part faults`: the
probes of a hardened server, one JSON line each: 200 stalled connections, a 100k-token
sentence, an oversized gRPC shape, a REST version path of 5,000 digits, a new version dropped
in mid-load, SIGTERM mid-load.
Records go to benchmarks/results/serving-<part>-<UTC stamp>.jsonl.

    .venv/bin/python benchmarks/serving.py --model-base-path saved_models/m30k-ende --part load \
        [--batching off on --num-batch-threads 2 --clients 32 --requests 50]
    .venv/bin/python benchmarks/serving.py --model-base-path saved_models/m30k-ende --part faults
"""

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import tensorflow as tf
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

from pipelines.corpus import read_lines

NAME = "bench"
RESULTS = Path(__file__).parent / "results"


def percentile(values, fraction):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] if ordered else None


class Server:
    """`keras-transformer serve` in a subprocess; ports read from the line it prints."""

    def __init__(self, base_path, *flags):
        command = [sys.executable, "-m", "keras_transformer", "serve", "--model-name", NAME]
        command += ["--model-base-path", str(base_path), "--rest-port", "0", "--grpc-port", "0"]
        self.process = subprocess.Popen(
            [*command, *flags], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
        line = self.process.stdout.readline()
        match = re.search(r":(\d+)/v1/models/.* gRPC [\d.]+:(\d+)", line)
        if not match:
            raise RuntimeError(f"the server did not start: {line!r}")
        self.rest_port, self.grpc_port = int(match[1]), int(match[2])
        self.url = f"http://127.0.0.1:{self.rest_port}/v1/models/{NAME}"

    def peak_rss_mib(self):
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        return round(int(re.search(r"VmHWM:\s+(\d+)", status)[1]) / 1024)

    def stop(self):
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=120)


def rest_predict(server, sentences, timeout=300):
    """(status, JSON) of a row-format request."""
    body = json.dumps({"instances": sentences}).encode()
    try:
        with urllib.request.urlopen(f"{server.url}:predict", body, timeout=timeout) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def grpc_request(sentences):
    request = predict_pb2.PredictRequest()
    request.model_spec.name = NAME
    request.inputs["text"].CopyFrom(tf.make_tensor_proto(sentences))
    return request


def grpc_stub(server):
    channel = grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}")
    return prediction_service_pb2_grpc.PredictionServiceStub(channel)


def load(server, api, sentences, clients, requests):
    """`clients` threads × `requests` one-sentence requests: throughput, latency, errors."""
    latencies, errors = [], []

    def client(index):
        stub = grpc_stub(server) if api == "grpc" else None
        for request in range(requests):
            sentence = sentences[(index * requests + request) % len(sentences)]
            start = time.perf_counter()
            try:
                if stub is not None:
                    stub.Predict(grpc_request([sentence]), timeout=300)
                else:
                    status, reply = rest_predict(server, [sentence])
                    if status != 200:
                        raise RuntimeError(f"{status}: {reply}")
                latencies.append(time.perf_counter() - start)
            except Exception as error:  # counted, reported
                errors.append(repr(error)[:200])

    start = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(client, range(clients)))
    seconds = time.perf_counter() - start
    return {
        "api": api,
        "clients": clients,
        "requests": len(latencies) + len(errors),
        "errors": len(errors),
        "first_errors": errors[:3],
        "requests_per_s": round(len(latencies) / seconds, 2),
        "latency_p50_s": round(percentile(latencies, 0.5), 3),
        "latency_p99_s": round(percentile(latencies, 0.99), 3),
    }


def batching_flags(mode, args):
    if mode == "off":
        return []
    return [
        "--enable-batching",
        "--max-batch-size",
        str(args.clients),
        "--num-batch-threads",
        str(args.num_batch_threads),
    ]


def load_part(args, sentences):
    records = []
    for mode in args.batching:
        server = Server(args.model_base_path, *batching_flags(mode, args))
        for sentence in sentences:  # the first calls of a loaded SavedModel are the slowest
            rest_predict(server, [sentence])
        for api in ("rest", "grpc"):
            record = load(server, api, sentences, args.clients, args.requests)
            threads = args.num_batch_threads if mode == "on" else 4
            record = {"batching": mode, "num_batch_threads": threads, **record}
            records.append({"benchmark": "serving-load", **record})
            print(json.dumps(records[-1]), flush=True)
        rss = server.peak_rss_mib()
        for record in records[-2:]:
            record["server_peak_rss_mib"] = rss
        server.stop()
    return records


def ending(connection) -> str:
    """Waits for the server to end `connection`: "closed" (its socket timeout), or "refused"
    (503 at once: over serve's --max-connections)."""
    try:
        data = connection.recv(1024)
    except OSError:  # reset: closed too
        return "closed"
    return "refused" if data.startswith(b"HTTP/1.1 503") else "closed" if not data else "answered"


def stalled_connections(server, sentences, count=200):
    """`count` connections that send half a request and stall, while others are served."""
    stalled = []
    for _ in range(count):
        connection = socket.create_connection(("127.0.0.1", server.rest_port), timeout=60)
        connection.sendall(b"POST /v1/models/bench:predict HTTP/1.1\r\nContent-Length: 100\r\n")
        stalled.append(connection)
    served = [rest_predict(server, [s])[0] for s in sentences[:10]]
    start = time.perf_counter()
    endings = [ending(connection) for connection in stalled]
    seconds = time.perf_counter() - start
    for connection in stalled:
        connection.close()
    return {
        "probe": "200 stalled connections",
        "served_meanwhile": {str(k): served.count(k) for k in set(served)},
        "stalled_ended_by_server": {k: endings.count(k) for k in set(endings)},
        "closed_within_s": round(seconds, 1),
    }


def long_sentence(server):
    start = time.perf_counter()
    status, reply = rest_predict(server, [" ".join(["word"] * 100_000)])
    return {
        "probe": "a 100k-token sentence",
        "status": status,
        "error": reply.get("error"),
        "answered_in_s": round(time.perf_counter() - start, 3),
    }


def oversized_shape(server):
    request = grpc_request(["x"])
    request.inputs["text"].ClearField("string_val")
    request.inputs["text"].tensor_shape.dim[0].size = 10**9
    start = time.perf_counter()
    try:
        grpc_stub(server).Predict(request, timeout=60)
        code, details = "OK", ""
    except grpc.RpcError as error:
        code, details = error.code().name, error.details()
    return {
        "probe": "an oversized gRPC shape ([1e9] declared)",
        "code": code,
        "details": details,
        "answered_in_s": round(time.perf_counter() - start, 3),
    }


def long_version_path(server):
    """A version of 5,000 digits in a REST path: past Python's int-conversion limit."""
    try:
        with urllib.request.urlopen(f"{server.url}/versions/{'9' * 5000}", timeout=60) as reply:
            status, body = reply.status, reply.read()
    except urllib.error.HTTPError as error:
        status, body = error.code, error.read()
    return {
        "probe": "a REST version path of 5,000 digits",
        "status": status,
        "error": json.loads(body).get("error", "")[:100],
    }


def versions_seen(server, sentences, during, clients=8):
    """gRPC load while `during()` runs: answers by version, errors."""
    seen, errors, done = [], [], threading.Event()

    def client(index):
        stub = grpc_stub(server)
        for request in range(10_000):
            if done.is_set():
                return
            try:
                sentence = sentences[(index + request) % len(sentences)]
                seen.append(
                    stub.Predict(grpc_request([sentence]), timeout=300).model_spec.version.value
                )
            except grpc.RpcError as error:
                errors.append(error.code().name)

    with ThreadPoolExecutor(clients) as pool:
        running = [pool.submit(client, i) for i in range(clients)]
        try:
            during()
        finally:
            done.set()
        for future in running:
            future.result()
    return seen, errors


def states(server) -> dict:
    with urllib.request.urlopen(server.url, timeout=60) as reply:
        return {s["version"]: s for s in json.loads(reply.read())["model_version_status"]}


def wait_for_state(server, version, state, seconds=120):
    stop = time.monotonic() + seconds
    while states(server).get(version, {}).get("state") != state:
        if time.monotonic() > stop:
            raise RuntimeError(f"version {version} never became {state}")
        time.sleep(0.2)


def new_version(base, sentences):
    server = Server(base, "--enable-batching", "--file-system-poll-wait-seconds", "1")

    def drop_in():
        time.sleep(2)
        staging = base / ".2.partial"
        shutil.copytree(base / "1", staging)
        os.rename(staging, base / "2")  # as `export` does: never half a version
        wait_for_state(server, "2", "AVAILABLE")
        wait_for_state(server, "1", "END")
        time.sleep(2)
        (base / "3").mkdir()  # then a corrupt one
        (base / "3" / "saved_model.pb").write_bytes(b"not a SavedModel")
        (base / "3" / "variables").mkdir()
        (base / "3" / "variables" / "variables.index").write_bytes(b"")
        wait_for_state(server, "3", "END")
        time.sleep(2)

    seen, errors = versions_seen(server, sentences, drop_in)
    final = states(server)
    server.stop()
    return {
        "probe": "a new version dropped in mid-load, then a corrupt one",
        "answers_by_version": {str(v): seen.count(v) for v in sorted(set(seen))},
        "errors": errors,
        "final_status": {v: s["state"] for v, s in final.items()},
        "corrupt_version_error": final["3"]["status"]["error_message"][:100],
    }


def sigterm_mid_load(base, sentences, clients=8):
    server = Server(base, "--enable-batching")
    answered, refused, lost = [], [], []

    def client(index):
        for request in range(1000):
            try:
                status, _ = rest_predict(server, [sentences[(index + request) % len(sentences)]])
            except (urllib.error.URLError, ConnectionError) as error:
                refused.append(type(error).__name__)  # no connection: the server has stopped
                return
            (answered if status == 200 else refused if status == 503 else lost).append(status)
            if status != 200:
                return

    with ThreadPoolExecutor(clients) as pool:
        running = [pool.submit(client, i) for i in range(clients)]
        time.sleep(3)
        start = time.perf_counter()
        server.process.send_signal(signal.SIGTERM)
        code = server.process.wait(timeout=120)
        exit_seconds = time.perf_counter() - start
        for future in running:
            future.result()
    return {
        "probe": "SIGTERM mid-load",
        "answered": len(answered),
        "refused_cleanly": {k: refused.count(k) for k in set(map(str, refused))},
        "lost": lost,
        "exit_code": code,
        "exit_s": round(exit_seconds, 1),
    }


def faults_part(args, sentences):
    records = []
    server = Server(args.model_base_path, "--enable-batching", "--socket-timeout-s", "5")
    for probe in (stalled_connections, long_sentence, oversized_shape, long_version_path):
        records.append(probe(server, sentences) if probe is stalled_connections else probe(server))
        print(json.dumps(records[-1]), flush=True)
    records.append(
        {"probe": "server up after the probes", "status": rest_predict(server, ["A."])[0]}
    )
    server.stop()
    with tempfile.TemporaryDirectory() as scratch:
        base = Path(scratch) / NAME
        base.mkdir()
        latest = max(p for p in args.model_base_path.iterdir() if p.name.isdigit())
        shutil.copytree(latest, base / "1")
        records.append(new_version(base, sentences))
        print(json.dumps(records[-1]), flush=True)
        records.append(sigterm_mid_load(base, sentences))
        print(json.dumps(records[-1]), flush=True)
    return [{"benchmark": "serving-faults", **record} for record in records]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-base-path", type=Path, required=True)
    parser.add_argument("--data-dir", type=Path, default=Path("../shared/data/multi30k"))
    parser.add_argument("--part", choices=["load", "faults"], required=True)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--requests", type=int, default=50)
    parser.add_argument("--batching", nargs="+", choices=["off", "on"], default=["off", "on"])
    parser.add_argument(
        "--num-batch-threads", type=int, default=2, help="with batching on (off: serve's 4)"
    )
    args = parser.parse_args()

    sentences = read_lines(args.data_dir / "test_2016_flickr.en.gz")[:64]
    part = load_part if args.part == "load" else faults_part
    records = part(args, sentences)
    stamp = time.strftime("%Y-%m-%dT%H%MZ", time.gmtime())
    path = RESULTS / f"serving-{args.part}-{stamp}.jsonl"
    path.write_text("".join(json.dumps({**r, "date_utc": stamp}) + "\n" for r in records))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
