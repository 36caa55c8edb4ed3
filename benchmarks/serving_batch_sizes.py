"""What requests of every batch size cost a served XLA export: compilations, then steady state.

Loads the highest version under `--model-base-path` as `keras-transformer serve` does (its
warm-up requests included), then makes two passes over requests of 1, 2, ..., `--largest`
copies of one real Multi30k test sentence (`serving_default`: beam 4, α 0.6), and prints one
JSON line: the load's seconds, each pass's seconds, and resident memory after each. The first
pass pays XLA's compilation of every request shape the warm-up did not cover; the second runs
compiled programs only, so it measures what padding rows to `translator.ROW_BUCKETS` costs.

    .venv/bin/python benchmarks/serving_batch_sizes.py --model-base-path saved_models/demo
"""

import argparse
import json
import time
from pathlib import Path

import psutil
import tensorflow as tf

from keras_transformer.serving.server import ServedModel
from pipelines.corpus import read_lines


def resident_mib():
    return round(psutil.Process().memory_info().rss / 2**20)


def timed_pass(serve, sentence, largest):
    start = time.perf_counter()
    for batch in range(1, largest + 1):
        serve(text=tf.constant([sentence] * batch))
    return round(time.perf_counter() - start, 1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-base-path", type=Path, required=True)
    parser.add_argument("--data-dir", type=Path, default=Path("../shared/data/multi30k"))
    parser.add_argument("--largest", type=int, default=16, help="the largest batch requested")
    args = parser.parse_args()

    sentence = read_lines(args.data_dir / "test_2016_flickr.en.gz")[0]
    start = time.perf_counter()
    model = ServedModel(args.model_base_path.name, args.model_base_path)
    record = {
        "model_base_path": str(args.model_base_path),
        "load_s": round(time.perf_counter() - start, 1),
        "warmup_requests": model.warmup_requests,
        "rss_after_load_mib": resident_mib(),
    }
    serve = model.signatures["serving_default"]
    for name in ("first", "second"):
        record[f"{name}_pass_s"] = timed_pass(serve, sentence, args.largest)
        record[f"rss_after_{name}_pass_mib"] = resident_mib()
    print(json.dumps(record))


if __name__ == "__main__":
    main()
