"""Load on the TF-Serving-compatible endpoint: requests/s and latency percentiles.

Starts `keras-transformer serve`'s server in this process on free loopback ports over an export
base path, then runs `--clients` concurrent HTTP clients × `--requests` `:predict` requests each
(one real Multi30k test sentence per request, row format, `serving_default`: beam 4, α 0.6),
after a timed warm-up of one request per sentence, and prints one JSON line with the seconds to
load the model (its own warm-up requests included) and of that warm-up, requests/s, p50/p90/p99
latency, failures, and the server process's peak resident memory.

    .venv/bin/python benchmarks/serving.py --model-base-path saved_models/m30k-ende \\
        [--clients 16 --requests 20]
"""

import argparse
import json
import resource
import statistics
import threading
import time
import urllib.request
from pathlib import Path

from keras_transformer.serving.server import ModelServer, ServedModel
from pipelines.corpus import read_lines


def percentile(values, fraction):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-base-path", type=Path, required=True)
    parser.add_argument("--data-dir", type=Path, default=Path("../shared/data/multi30k"))
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--requests", type=int, default=20)
    args = parser.parse_args()

    sentences = read_lines(args.data_dir / "test_2016_flickr.en.gz")[:64]
    start = time.perf_counter()
    model = ServedModel("bench", args.model_base_path)  # loads, and runs any warm-up requests
    load_seconds = time.perf_counter() - start
    server = ModelServer(model, rest_port=0, grpc_port=0)
    server.start()
    url = f"http://127.0.0.1:{server.rest_port}/v1/models/bench:predict"
    latencies, failures = [], []

    def post(sentence):
        body = {"instances": [sentence]}
        with urllib.request.urlopen(url, json.dumps(body).encode(), timeout=300) as r:
            r.read()

    def client(index):
        for request in range(args.requests):
            sentence = sentences[(index * args.requests + request) % len(sentences)]
            start = time.perf_counter()
            try:
                post(sentence)
                latencies.append(time.perf_counter() - start)
            except Exception as error:  # counted, reported
                failures.append(repr(error))

    # Warm-up, timed on its own: the first calls of a freshly loaded SavedModel are the slowest,
    # and an export with --jit-compile compiles its search once per padded source width.
    start = time.perf_counter()
    for sentence in sentences:
        post(sentence)
    warmup_seconds = time.perf_counter() - start
    start = time.perf_counter()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(args.clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - start
    server.stop()
    print(
        json.dumps(
            {
                "benchmark": "serving",
                "clients": args.clients,
                "load_s": round(load_seconds, 1),
                "load_warmup_requests": model.warmup_requests,
                "warmup_s": round(warmup_seconds, 1),
                "requests": len(latencies) + len(failures),
                "failures": len(failures),
                "requests_per_s": round(len(latencies) / seconds, 2),
                "latency_p50_s": round(percentile(latencies, 0.5), 3),
                "latency_p90_s": round(percentile(latencies, 0.9), 3),
                "latency_p99_s": round(percentile(latencies, 0.99), 3),
                "latency_mean_s": round(statistics.mean(latencies), 3),
                "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
                "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            }
        )
    )


if __name__ == "__main__":
    main()
