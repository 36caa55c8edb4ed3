"""Load and fault probes on `keras-transformer serve`: batching off against on, REST and gRPC.

Tables: docs/SERVER_PERFORMANCE.md#the-asgi-server-against-the-httpserver-one (`--part
compare`), docs/SERVER_PERFORMANCE.md#batching (`--part load`) and
docs/SERVER_PERFORMANCE.md#fault-probes (`--part faults`).

Each server is `keras-transformer serve` in a process of its own over `--model-base-path` (its
peak resident memory is read from /proc at the end). `--part load`: for batching off, then on,
`--clients` concurrent clients × `--requests` `:predict` requests each (one real Multi30k test
sentence a request, `serving_default`: beam 4, α 0.6) over REST, then the same over gRPC with
the official `tensorflow-serving-api` stub, after one warm-up request per sentence; one JSON
line per API and mode: requests/s, p50/p99 latency, errors, peak RSS, and the server's batches
(count and mean sentences, from its metrics). With `--run` (the training run the export was made
from), a profile of what a batch spends follows, one line: each sentence's decoding steps alone
(a sentence leaves the compacted search's batch when its own search ends, so this is its time
in any batch); for batches of the server's mean size, the steps against the longest sentence's,
the rows alive per step and the source padding; and the SavedModel's time per step at each live
batch size, which together estimate how much of a batch's time goes to its longest sentence.
The record's first line names the model (base path, version, export options). `--part faults`: the
probes of a hardened server, one JSON line each: 200 stalled connections, a 100k-token
sentence, an oversized gRPC shape, a REST version path of 5,000 digits, a new version dropped
in mid-load, SIGTERM mid-load.
`--part compare`: old `serve` (`--baseline-checkout`, a checkout of main, run from there with its
own Python) and this checkout's, alternated round by round (`--rounds`, the order swapped each
round), on the same export: for batching off, then on, REST and gRPC load as `--part load`; with
batching off, LibreTranslate's `/translate` of a 20-sentence HTML paragraph (`--repeats` times),
then `--idle` keep-alive connections and `--stalled` stalled mid-body held open while the load
runs again: the server's threads and resident memory before and meanwhile, and p99 of the active
clients quiet and meanwhile. Each round's records, then each figure's range across the rounds.
Records go to benchmarks/results/serving-<part>-<UTC stamp>.jsonl.

    .venv/bin/python benchmarks/serving.py --model-base-path saved_models/m30k-ende --part load \
        --run runs/m30k-ende [--batching off on --num-batch-threads 2 --batch-timeout-micros 50000 \
        --clients 32 --requests 50]
    .venv/bin/python benchmarks/serving.py --model-base-path saved_models/m30k-ende --part faults
    git worktree add --detach ../kt-main main && (cd ../kt-main && make install)
    .venv/bin/python benchmarks/serving.py --model-base-path saved_models/m30k-ende \
        --part compare --baseline-checkout ../kt-main [--rounds 3 --clients 32 --requests 50]
"""

import argparse
import json
import os
import re
import resource
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
import numpy as np
import tensorflow as tf
from records import machine
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

from keras_transformer.decoding.translator import load_run
from keras_transformer.export.layout import WARMUP_REQUESTS
from keras_transformer.export.versions import versions
from pipelines.corpus import read_lines

NAME = "bench"
RESULTS = Path(__file__).parent / "results"


def percentile(values, fraction):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] if ordered else None


class Server:
    """`keras-transformer serve` in a subprocess; ports read from the line it prints. By
    default this checkout's, with this Python; `checkout` (a `Checkout`) runs another's."""

    def __init__(self, base_path, *flags, checkout=None):
        python, cwd = (checkout.python, checkout.path) if checkout else (sys.executable, None)
        command = [str(python), "-m", "keras_transformer", "serve", "--model-name", NAME]
        command += ["--model-base-path", str(base_path), "--rest-port", "0", "--grpc-port", "0"]
        self.process = subprocess.Popen(
            [*command, *flags],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            cwd=cwd,
        )
        line = self.process.stdout.readline()
        match = re.search(r":(\d+)/v1/models/.* gRPC [\d.]+:(\d+)", line)
        if not match:
            raise RuntimeError(f"the server did not start: {line!r}")
        self.rest_port, self.grpc_port = int(match[1]), int(match[2])
        self.url = f"http://127.0.0.1:{self.rest_port}/v1/models/{NAME}"

    def threads(self) -> int:
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        return int(re.search(r"Threads:\s+(\d+)", status)[1])

    def peak_rss_mib(self):
        return round(self.status_kib("VmHWM") / 1024)

    def status_kib(self, field) -> int:
        """A memory figure of the server's /proc status (VmRSS, VmHWM), in KiB."""
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        return int(re.search(rf"{field}:\s+(\d+)", status)[1])

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


def load(server, api, sentences, clients, requests) -> dict:
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


def metric_total(server, name) -> float:
    """The server's samples of metric `name` so far, summed over their labels."""
    with urllib.request.urlopen(
        f"http://127.0.0.1:{server.rest_port}/monitoring/prometheus/metrics", timeout=60
    ) as reply:
        text = reply.read().decode()
    pattern = rf"^{name}(?:{{[^}}]*}})? (\S+)$"
    return sum(float(value) for value in re.findall(pattern, text, re.MULTILINE))


def batch_totals(server) -> tuple[float, float]:
    """The server's model calls so far and the sentences they decoded, from its batch-size
    histogram."""
    return tuple(
        metric_total(server, f"keras_transformer_serving_batch_size_{name}")
        for name in ("count", "sum")
    )


def batching_flags(mode, args):
    if mode == "off":
        return []
    return [
        "--enable-batching",
        "--max-batch-size",
        str(args.clients),
        "--num-batch-threads",
        str(args.num_batch_threads),
        "--batch-timeout-micros",
        str(args.batch_timeout_micros),
    ]


def served_model(base_path) -> dict:
    """The export the servers load: its newest version, and whether it searches with XLA (only
    such an export holds warm-up requests)."""
    version = versions(base_path)[-1]
    jit_compile = (base_path / str(version) / WARMUP_REQUESTS).exists()
    return {"model_base_path": str(base_path), "version": version, "jit_compile": jit_compile}


def load_part(args, sentences):
    records = [{"benchmark": "serving-load", **setting(args)}]
    print(json.dumps(records[-1]), flush=True)
    mean_batches = []
    for mode in args.batching:
        server = Server(args.model_base_path, *batching_flags(mode, args))
        for sentence in sentences:  # the first calls of a loaded SavedModel are the slowest
            rest_predict(server, [sentence])
        for api in ("rest", "grpc"):
            before = batch_totals(server)
            record = load(server, api, sentences, args.clients, args.requests)
            batches, decoded = np.subtract(batch_totals(server), before)
            mean_batch = round(decoded / max(batches, 1), 1)
            mean_batches.append(mean_batch)
            threads = args.num_batch_threads if mode == "on" else 4
            record = {
                "batching": mode,
                "num_batch_threads": threads,
                "batch_timeout_micros": args.batch_timeout_micros if mode == "on" else None,
                **record,
                "batches": int(batches),
                "mean_batch_sentences": mean_batch,
            }
            records.append({"benchmark": "serving-load", **record})
            print(json.dumps(records[-1]), flush=True)
        rss = server.peak_rss_mib()
        for record in records[-2:]:
            record["server_peak_rss_mib"] = rss
        server.stop()
    if args.run is not None:
        batch_size = max(1, round(max(mean_batches)))
        records.append({"benchmark": "serving-profile", **profile(args, sentences, batch_size)})
        print(json.dumps(records[-1]), flush=True)
    return records


def steps_alone(run, sentences) -> tuple[list, list]:
    """Each sentence's source length (subwords with EOS) and the steps `serving_default`'s
    search (beam 4, α 0.6, best hypothesis exact) runs for it alone."""
    translator = load_run(run)
    rows = translator.encode_sentences(sentences)
    steps = [int(translator.decode_n_best(np.array([row])).steps[0]) for row in rows]
    return [len(row) for row in rows], steps


def seconds_per_step(base_path, sentence, steps, sizes=(1, 2, 4, 8, 16, 32)) -> dict:
    """The SavedModel's seconds per decoding step with `n` sentences alive throughout: `n`
    copies of `sentence` (which runs `steps` steps), best of 3 after a first call."""
    signature = tf.saved_model.load(str(base_path / str(versions(base_path)[-1])))
    serve = signature.signatures["serving_default"]
    timings = {}
    for n in sizes:
        text = tf.constant([sentence] * n)
        serve(text=text)
        best = float("inf")
        for _ in range(3):
            start = time.perf_counter()
            serve(text=text)
            best = min(best, time.perf_counter() - start)
        timings[n] = best / steps
    return timings


def profile(args, sentences, batch_size) -> dict:
    """What batches of `batch_size` of the load's sentences spend (module docstring)."""
    lengths, steps = steps_alone(args.run, sentences)
    typical = int(np.argsort(steps)[len(steps) // 2])
    per_step = seconds_per_step(args.model_base_path, sentences[typical], steps[typical])
    sizes = sorted(per_step)

    def step_seconds(alive):
        return np.interp(alive, sizes, [per_step[n] for n in sizes])

    batches = []
    for start in range(0, len(sentences) - batch_size + 1, batch_size):
        these = np.array(steps[start : start + batch_size])
        widths = np.array(lengths[start : start + batch_size])
        alive = np.array([(these > t).sum() for t in range(these.max())])
        seconds = step_seconds(alive)
        batches.append(
            {
                "longest_steps": int(these.max()),
                "mean_steps": float(these.mean()),
                "hypothesis_steps_share": float(these.sum() / (these.max() * len(these))),
                "source_padding_share": float(1 - widths.sum() / (widths.max() * len(widths))),
                "alive_at_quarter_steps": [int(alive[len(alive) * q // 4]) for q in (1, 2, 3)],
                "seconds": float(seconds.sum()),
                # after the batch's median sentence has finished: the long sentences' tail
                "tail_share": float(seconds[int(np.median(these)) :].sum() / seconds.sum()),
            }
        )

    def mean(key):
        return round(float(np.mean([b[key] for b in batches])), 3)

    return {
        "run": str(args.run),
        "sentences": len(sentences),
        "source_subwords_mean": round(float(np.mean(lengths)), 1),
        "steps_alone": {"mean": round(float(np.mean(steps)), 1), "max": max(steps)},
        "ms_per_step_by_live_sentences": {n: round(s * 1e3, 2) for n, s in per_step.items()},
        "ms_per_sentence_step_by_live_sentences": {
            n: round(s * 1e3 / n, 3) for n, s in per_step.items()
        },
        "batch_sentences": batch_size,
        "batches": len(batches),
        **{
            f"batch_{key}_mean": mean(key)
            for key in (
                "longest_steps",
                "mean_steps",
                "hypothesis_steps_share",
                "source_padding_share",
                "seconds",
                "tail_share",
            )
        },
        "batch_alive_at_quarter_steps": [
            round(float(np.mean([b["alive_at_quarter_steps"][q] for b in batches])), 1)
            for q in range(3)
        ],
    }


def ending(connection) -> str:
    """Waits for the server to end `connection`: "closed" (its socket timeout, or no reply in
    the probe's 60 s), "timed out" (408 after serve's --socket-timeout-s), or "refused" (503 at
    once: over serve's --max-connections)."""
    try:
        data = connection.recv(1024)
    except OSError:  # reset: closed too
        return "closed"
    if data.startswith(b"HTTP/1.1 503"):
        return "refused"
    if data.startswith(b"HTTP/1.1 408"):
        return "timed out"
    return "closed" if not data else "answered"


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
        "server_threads": server.threads(),
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


def setting(args) -> dict:
    """What a record's first line names: the machine, the model and TensorFlow's oneDNN setting,
    which the servers inherit (its kernels decide a small model's speed)."""
    return {
        "machine": machine(),
        "model": served_model(args.model_base_path),
        "TF_ENABLE_ONEDNN_OPTS": os.environ.get("TF_ENABLE_ONEDNN_OPTS"),
    }


def faults_part(args, sentences):
    records = [{"benchmark": "serving-faults", **setting(args)}]
    print(json.dumps(records[-1]), flush=True)
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


# -- old and new side by side (`--part compare`) ----------------------------------------------


class Checkout:
    """A checkout whose `serve` is measured: its directory (run from there, so that its own
    `keras_transformer` is imported) and the Python of its virtual environment."""

    def __init__(self, side, path, python):
        self.side, self.path, self.python = side, Path(path).resolve(), Path(python).absolute()
        self.commit = subprocess.run(
            ["git", "-C", str(self.path), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()


def raise_open_files(needed):
    """Enough file descriptors for this process's connections (each a socket); the servers,
    its children, inherit the limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        wanted = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))


def idle_connections(server, count) -> list[socket.socket]:
    """`count` keep-alive connections, each answered one status request and then silent."""
    request = f"GET /v1/models/{NAME} HTTP/1.1\r\nHost: bench\r\n\r\n".encode()
    connections = []
    for _ in range(count):
        connection = socket.create_connection(("127.0.0.1", server.rest_port), timeout=60)
        connection.sendall(request)
        read_reply(connection)
        connections.append(connection)
    return connections


def read_reply(connection) -> bytes:
    """A whole reply of `connection` (headers and a Content-Length body): nothing left unread
    that `still_open` would take for more."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += connection.recv(65536)
    head, body = data.split(b"\r\n\r\n", 1)
    length = int(re.search(rb"(?i)content-length:\s*(\d+)", head)[1])
    while len(body) < length:
        body += connection.recv(65536)
    return head + b"\r\n\r\n" + body


def stalled_mid_body(server, count) -> list[socket.socket]:
    """`count` connections whose request's headers are whole and its body 99 bytes short."""
    head = f"POST /v1/models/{NAME}:predict HTTP/1.1\r\nContent-Length: 100\r\n\r\n{{"
    connections = []
    for _ in range(count):
        connection = socket.create_connection(("127.0.0.1", server.rest_port), timeout=60)
        connection.sendall(head.encode())
        connections.append(connection)
    return connections


def still_open(connection) -> bool:
    """Whether the server has kept `connection` open, silent: neither closed nor answered."""
    connection.setblocking(False)  # a socket with a timeout would wait for data
    try:
        connection.recv(1, socket.MSG_PEEK)
        return False  # an answer, or b"": closed
    except BlockingIOError:
        return True  # nothing to read, and open
    except OSError:  # reset
        return False


def connections_probe(server, sentences, args) -> dict:
    """Threads and resident memory of `server` before and after `args.idle` idle keep-alive
    connections and `args.stalled` stalled mid-body, and p99 of `args.clients` active clients
    before (quiet) and meanwhile."""
    quiet = load(server, "rest", sentences, args.clients, args.requests)
    threads, rss_kib = server.threads(), server.status_kib("VmRSS")
    held = idle_connections(server, args.idle) + stalled_mid_body(server, args.stalled)
    try:
        held_threads, held_rss_kib = server.threads(), server.status_kib("VmRSS")
        meanwhile = load(server, "rest", sentences, args.clients, args.requests)
        open_at_end = sum(still_open(connection) for connection in held)
    finally:
        for connection in held:
            connection.close()
    return {
        "idle": args.idle,
        "stalled": args.stalled,
        "threads_quiet": threads,
        "threads_held": held_threads,
        "rss_quiet_mib": round(rss_kib / 1024, 1),
        "rss_held_mib": round(held_rss_kib / 1024, 1),
        "rss_per_connection_kib": round((held_rss_kib - rss_kib) / len(held), 1),
        "connections_open_at_end": open_at_end,
        "p99_quiet_s": quiet["latency_p99_s"],
        "p99_held_s": meanwhile["latency_p99_s"],
        "p99_held_over_quiet": round(meanwhile["latency_p99_s"] / quiet["latency_p99_s"], 2),
        "errors_held": meanwhile["errors"],
        "first_errors_held": meanwhile["first_errors"],
    }


def html_paragraph(sentences, count=20) -> str:
    return "<p>" + " ".join(sentences[:count]) + "</p>"


def paragraph_latency(server, sentences, repeats) -> dict:
    """LibreTranslate's `/translate` of a 20-sentence HTML paragraph, `repeats` times one
    after another, into the first target of the first language that has one."""
    base = f"http://127.0.0.1:{server.rest_port}"
    with urllib.request.urlopen(f"{base}/languages", timeout=60) as reply:
        source = next(language for language in json.loads(reply.read()) if language["targets"])
    body = {
        "q": html_paragraph(sentences),
        "source": source["code"],
        "target": source["targets"][0],
        "format": "html",
    }
    request = urllib.request.Request(
        f"{base}/translate", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        with urllib.request.urlopen(request, timeout=300) as reply:
            reply.read()
        seconds.append(time.perf_counter() - start)
    return {
        "sentences": 20,
        "repeats": repeats,
        "latency_p50_s": round(percentile(seconds, 0.5), 3),
        "latency_min_s": round(min(seconds), 3),
    }


def side_round(checkout, args, sentences) -> list[dict]:
    """One round of one side: for batching off, then on, a server from `checkout` under REST
    and gRPC load; with batching off, the HTML paragraph and the connections probe too."""
    records = []
    for mode in args.batching:
        flags = [*batching_flags(mode, args), "--socket-timeout-s", str(args.socket_timeout_s)]
        server = Server(args.model_base_path, *flags, checkout=checkout)
        try:
            for sentence in sentences:  # the first calls of a loaded SavedModel are the slowest
                rest_predict(server, [sentence])
            found = [
                {"measure": "load", **load(server, api, sentences, args.clients, args.requests)}
                for api in ("rest", "grpc")
            ]
            if mode == "off":
                found.append(
                    {"measure": "paragraph", **paragraph_latency(server, sentences, args.repeats)}
                )
                found.append(
                    {"measure": "connections", **connections_probe(server, sentences, args)}
                )
        finally:
            server.stop()
        records += [{"side": checkout.side, "batching": mode, **record} for record in found]
    return records


# The figures whose range across rounds the summary gives, by measure.
SUMMARIZED = {
    "load": ("requests_per_s", "latency_p50_s", "latency_p99_s", "errors"),
    "paragraph": ("latency_p50_s", "latency_min_s"),
    "connections": (
        "threads_quiet",
        "threads_held",
        "rss_per_connection_kib",
        "p99_quiet_s",
        "p99_held_s",
        "p99_held_over_quiet",
        "connections_open_at_end",
        "errors_held",
    ),
}


def summary(records) -> list[dict]:
    """Each side's range (min, max) across the rounds of each figure, by cell."""
    cells = {}
    for record in records:
        key = (record["measure"], record["batching"], record.get("api"), record["side"])
        cells.setdefault(key, []).append(record)
    return [
        {
            "measure": measure,
            "batching": batching,
            "api": api,
            "side": side,
            "rounds": len(found),
            **{
                name: [min(r[name] for r in found), max(r[name] for r in found)]
                for name in SUMMARIZED[measure]
            },
        }
        for (measure, batching, api, side), found in sorted(cells.items(), key=str)
    ]


def compare_part(args, sentences):
    """Old and new `serve` alternated round by round (the order swapped each round), so that
    the shared machine's drift weighs on both alike; every round's records, then the range of
    each figure across the rounds."""
    if args.baseline_checkout is None:
        raise SystemExit("--part compare needs --baseline-checkout (a checkout of main)")
    raise_open_files(2 * (args.idle + args.stalled + args.clients) + 1024)
    baseline_python = args.baseline_python or args.baseline_checkout / ".venv" / "bin" / "python"
    sides = [
        Checkout("old", args.baseline_checkout, baseline_python),
        Checkout("new", Path(__file__).resolve().parents[1], sys.executable),
    ]
    records = [
        {
            "benchmark": "serving-compare",
            **setting(args),
            "commits": {side.side: side.commit for side in sides},
            "clients": args.clients,
            "requests": args.requests,
        }
    ]
    print(json.dumps(records[-1]), flush=True)
    for round_index in range(args.rounds):
        for checkout in sides if round_index % 2 == 0 else sides[::-1]:
            for record in side_round(checkout, args, sentences):
                records.append({"benchmark": "serving-compare", "round": round_index, **record})
                print(json.dumps(records[-1]), flush=True)
    for record in summary(records[1:]):
        records.append({"benchmark": "serving-compare-summary", **record})
        print(json.dumps(records[-1]), flush=True)
    return records


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-base-path", type=Path, required=True)
    parser.add_argument("--data-dir", type=Path, default=Path("../shared/data/multi30k"))
    parser.add_argument("--part", choices=["load", "faults", "compare"], required=True)
    parser.add_argument(
        "--run", type=Path, help="load: the training run the export came from, to profile batches"
    )
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--requests", type=int, default=50)
    parser.add_argument("--batching", nargs="+", choices=["off", "on"], default=["off", "on"])
    parser.add_argument(
        "--num-batch-threads", type=int, default=2, help="with batching on (off: serve's 4)"
    )
    parser.add_argument(
        "--batch-timeout-micros",
        type=int,
        default=50_000,
        help="with batching on: long enough for every client's next request to join the batch "
        "(serve's default, 5000, splits the clients into smaller batches)",
    )
    compare = parser.add_argument_group("--part compare: old and new serve, alternated")
    compare.add_argument("--baseline-checkout", type=Path, help="a checkout of main")
    compare.add_argument(
        "--baseline-python",
        type=Path,
        help="the baseline's Python (default: its .venv/bin/python)",
    )
    compare.add_argument("--rounds", type=int, default=3)
    compare.add_argument("--idle", type=int, default=1000, help="idle keep-alive connections")
    compare.add_argument("--stalled", type=int, default=200, help="connections stalled mid-body")
    compare.add_argument("--repeats", type=int, default=5, help="HTML paragraph translations")
    compare.add_argument(
        "--socket-timeout-s",
        type=float,
        default=600.0,
        help="serve's, long enough that no held connection times out while measured",
    )
    args = parser.parse_args()

    sentences = read_lines(args.data_dir / "test_2016_flickr.en.gz")[:64]
    part = {"load": load_part, "faults": faults_part, "compare": compare_part}[args.part]
    records = part(args, sentences)
    stamp = time.strftime("%Y-%m-%dT%H%MZ", time.gmtime())
    path = RESULTS / f"serving-{args.part}-{stamp}.jsonl"
    path.write_text("".join(json.dumps({**r, "date_utc": stamp}) + "\n" for r in records))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
