"""The input pipeline of `keras-transformer prepare` + `train --data` at Multi30k, 1M and WMT14
scale (issue 58): prepare time, training start-up to the first batch, memory, pipeline rate and
padding, one record per corpus size.

Table: docs/PERFORMANCE.md#input-pipeline-at-wmt-scale.

Corpora. The smallest size (29,000, Multi30k's training split) is the real
`DATA_DIR/train.{en,de}.gz`. A larger size N is built in a scratch directory as plain
`train.en` / `train.de`: ceil(N / 29,000) copies of the Multi30k training pairs, copy c in the
order of `numpy.random.default_rng(c).permutation(29000)` (pairs stay aligned), cut at N pairs.
So every pair recurs about N / 29,000 times, but never as one block repeated: the vocabulary's
random sample, the shards (pair i in shard i mod n) and the shuffle buffer see the mix a real
corpus of Multi30k-like sentences would give.

For each size:

- prepare: `pipelines.prepare.prepare` (what `keras-transformer prepare --train SRC TGT` runs)
  with the `multi30k` preset's max_length (128), vocab_size 8000, default sample_sentences and
  shard_pairs, in a fresh subprocess; its seconds (imports apart), pairs/s, peak RSS and its
  stages (input check and checksums, vocabulary text, vocabulary training, tokenize + write,
  of which the Python serialization and writing of records).
- start-up, in a fresh subprocess per bucketing variant: imports (`pipelines.prepared`,
  `pipelines.batching`, TensorFlow with them), then what the trainer does for the data before
  `fit` (`read_manifest`, `prepared_length_counts`, `fitted_bucket_boundaries` under XLA,
  `full_batches_per_pass`, `prepared_dataset(DIR, "train", BatchingSettings(batch_tokens,
  max_length, boundaries, pad_batches, shuffle=True, seed, repeat=True))`) and the first
  batch. Variants: `xla` (6 fitted buckets, pad_batches, as `train --jit-compile`) and
  `default` (boundaries None: one bucket per length to 32, then every 8).
- memory: that subprocess's RSS after the imports, after the first batch and after the measured
  batches, and its peak (`ru_maxrss`). The pipeline's own share is the RSS after the measured
  batches minus the RSS after the imports (TensorFlow's ~900 MiB would otherwise hide it); its
  ratio to the smallest size's share is the memory target.
- rate: after `--warmup` seconds of batches, `--seconds` of batches drawn in a `tf.function`
  loop on one iterator (as Keras' train function draws them; no model): batches, pairs and
  non-padding target tokens (`target_out != PAD`) per second.
- padding: of those batches, non-padding / all target positions (target_out), and
  `pipelines.padding_efficiency`'s formula (source + target_in).
- stages (unless `--no-stages`): in the same subprocess, `--stage-seconds` each, in the graph:
  reading the shard files (records/s), + parsing into chunks of pairs; from a memory cache of
  records: the 65,536-record shuffle, parsing; from a memory cache of parsed chunks: the cache
  alone, + `bucket_by_token_budget`. They show which step bounds the rate.

The targets (on a 2-core machine) are checked per size: start-up under 30 s at 4.5M pairs, the
pipeline's own memory within 1.5x of the 29k one, >= 500,000 non-padding target tokens/s,
padding efficiency >= 0.90.

Run (heavy: several minutes of prepare at 4.5M pairs; about 1.5 GB of scratch at 4.5M):

    .venv/bin/python benchmarks/data_scale.py [--sizes 29000 1000000 4500000]
        [--data-dir ../shared/data/multi30k] [--scratch /tmp/data-scale] [--seconds 30]
        [--out benchmarks/results/data-scale-<UTC timestamp>.jsonl] [--keep-scratch]

It prints a table and writes one JSON record per size (with date, command and machine). The
scratch directory (default a new one under /tmp) is removed at the end unless --keep-scratch;
a given --scratch that existed before is left, only what this run made in it is removed.
"""

import argparse
import datetime
import gzip
import json
import math
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RESULT_TAG = "DATA_SCALE_RESULT "
MULTI30K_PAIRS = 29_000
MAX_LENGTH = 128  # the multi30k preset's
VOCAB_SIZE = 8000
BATCH_TOKENS = 4096  # the multi30k preset's
XLA_BUCKETS = 6  # keras_transformer.training.trainer.XLA_BUCKETS (not imported: it loads Keras)
STAGE_CACHE_PAIRS = 100_000
PAIR_STRIDE = 1000  # the stages draw one pair in this many (Dataset.shard), one batch in
BATCH_STRIDE = 10
TARGETS = {
    "startup_s_at_4.5M": 30.0,
    "pipeline_own_ratio_max": 1.5,
    "target_tokens_per_s_min": 500_000,
    "padding_efficiency_min": 0.90,
}


def rss_mib() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def machine() -> dict:
    model = "unknown"
    with open("/proc/cpuinfo") as cpuinfo:
        for line in cpuinfo:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "affinity_cores": len(os.sched_getaffinity(0)),
        "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "python": platform.python_version(),
    }


# The corpora.


def read_lines(path) -> list[bytes]:
    with gzip.open(path, "rb") as file:
        return file.read().splitlines()


def corpus_files(size, data_dir, scratch) -> tuple[Path, Path, str]:
    """(source, target) files of `size` pairs, and how they were made."""
    source, target = data_dir / "train.en.gz", data_dir / "train.de.gz"
    english, german = read_lines(source), read_lines(target)
    if size == len(english):
        return source, target, f"Multi30k train as is ({source}, {target})"
    import numpy as np

    directory = scratch / f"corpus-{size}"
    directory.mkdir(parents=True, exist_ok=True)
    paths = directory / "train.en", directory / "train.de"
    copies = math.ceil(size / len(english))
    written = 0
    with paths[0].open("wb") as en, paths[1].open("wb") as de:
        for copy in range(copies):
            order = np.random.default_rng(copy).permutation(len(english))[: size - written]
            en.write(b"".join(english[i] + b"\n" for i in order))
            de.write(b"".join(german[i] + b"\n" for i in order))
            written += len(order)
    how = (
        f"{copies} copies of Multi30k train ({len(english)} pairs), copy c in the order of "
        f"numpy.random.default_rng(c).permutation, cut at {size} pairs; plain text"
    )
    return *paths, how


# The subprocesses: each prints one line, RESULT_TAG + JSON.


def child_environment() -> dict:
    return {
        **os.environ,
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }


def run_child(arguments, log) -> dict:
    command = [sys.executable, str(Path(__file__).resolve()), *arguments]
    load_before = os.getloadavg()[0]
    start = time.perf_counter()
    done = subprocess.run(
        command, env=child_environment(), cwd=REPO, capture_output=True, text=True, check=False
    )
    seconds = time.perf_counter() - start
    log.write(done.stderr)
    results = [line for line in done.stdout.splitlines() if line.startswith(RESULT_TAG)]
    if done.returncode or not results:
        sys.stderr.write(done.stdout[-3000:] + done.stderr[-3000:])
        raise SystemExit(f"{' '.join(arguments[:2])} failed (exit {done.returncode})")
    # Other work on the machine shows in the 1-minute load average (2 cores: 2.0 is full).
    load = [round(load_before, 2), round(os.getloadavg()[0], 2)]
    record = json.loads(results[-1][len(RESULT_TAG) :])
    return {**record, "process_s": round(seconds, 2), "load_average_before_after": load}


def emit(record):
    print(RESULT_TAG + json.dumps(record), flush=True)


def timed(function, totals, name):
    """`function`, adding its seconds to totals[name] at every call."""

    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            totals[name] = totals.get(name, 0.0) + time.perf_counter() - start

    return wrapper


def child_prepare(args):
    """`keras-transformer prepare --train SRC TGT --output OUT` as the CLI calls it, its stages
    timed by wrapping the module's functions in this process only."""
    start = time.perf_counter()
    from pipelines import prepare as prep

    imports = time.perf_counter() - start
    stages = {}
    prep._file_input = timed(prep._file_input, stages, "describe (sha256 of inputs)")
    prep._aligned_line_count = timed(prep._aligned_line_count, stages, "check (UTF-8, lines)")
    prep._write_training_text = timed(prep._write_training_text, stages, "vocabulary text")
    prep._train_vocabulary = timed(prep._train_vocabulary, stages, "vocabulary (all)")
    prep._write_split = timed(prep._write_split, stages, "tokenize + write")
    prep._SplitWriter.add = timed(prep._SplitWriter.add, stages, "  of which serialize + write")
    corpus = prep.corpus_description(train=[args.source, args.target], languages=("en", "de"))
    start = time.perf_counter()
    manifest = prep.prepare(
        args.output, corpus, vocab_size=args.vocab_size, max_length=args.max_length
    )
    seconds = time.perf_counter() - start
    train = manifest["splits"]["train"]
    emit(
        {
            "import_s": round(imports, 2),
            "prepare_s": round(seconds, 2),
            "stages_s": {name: round(value, 2) for name, value in stages.items()},
            "pairs_read": train["pairs_read"],
            "pairs_kept": train["pairs_kept"],
            "dropped": train["dropped"],
            "shards": len(train["shards"]),
            "shard_bytes": sum(shard["bytes"] for shard in train["shards"]),
            "vocabulary_sentences": manifest["vocabulary"]["sentences"],
            "vocabulary_sampled": manifest["vocabulary"]["sampled"],
            "peak_rss_mib": round(peak_rss_mib(), 1),
        }
    )


def child_pipeline(args):
    """Start-up to the first batch, memory, the rate and padding of the batches, and stages."""
    process_start = time.perf_counter()
    rss_start = rss_mib()
    import numpy as np
    import tensorflow as tf

    from pipelines.batching import (
        CHUNK_PAIRS,
        BatchingSettings,
        bucket_by_token_budget,
        fitted_bucket_boundaries,
        full_batches_per_pass,
    )
    from pipelines.prepared import (
        _parse_pairs,
        prepared_dataset,
        prepared_length_counts,
        read_manifest,
    )

    imported = time.perf_counter()
    rss_imported = rss_mib()
    xla = args.variant == "xla"
    steps = {}

    def step(name, function, *arguments, **keywords):
        start = time.perf_counter()
        value = function(*arguments, **keywords)
        steps[name] = round(time.perf_counter() - start, 4)
        return value

    data_start = time.perf_counter()
    manifest = step("read_manifest", read_manifest, args.prepared)
    counts = step(
        "prepared_length_counts", prepared_length_counts, args.prepared, "train", args.max_length
    )
    boundaries = (
        step(
            "fitted_bucket_boundaries",
            fitted_bucket_boundaries,
            counts,
            XLA_BUCKETS,
            args.max_length,
        )
        if xla
        else None
    )
    pass_batches = step(
        "full_batches_per_pass",
        full_batches_per_pass,
        counts,
        args.batch_tokens,
        args.max_length,
        boundaries,
    )
    dataset = step(
        "prepared_dataset",
        prepared_dataset,
        args.prepared,
        "train",
        BatchingSettings(
            args.batch_tokens,
            args.max_length,
            boundaries=boundaries,
            pad_batches=xla,
            shuffle=True,
            seed=args.seed,
            repeat=True,
        ),
    )
    iterator = step("iterator", iter, dataset)
    first = step("first batch", next, iterator)
    startup = time.perf_counter() - data_start
    rss_first = rss_mib()
    del first

    @tf.function
    def consume(count):
        totals = [tf.constant(0, tf.int64) for _ in range(6)]
        for _ in tf.range(count):
            (source, target_in), target_out = next(iterator)
            totals = [
                totals[0] + 1,
                totals[1] + tf.cast(tf.shape(target_out)[0], tf.int64),
                totals[2] + tf.math.count_nonzero(target_out),
                totals[3] + tf.size(target_out, tf.int64),
                totals[4] + tf.math.count_nonzero(source) + tf.math.count_nonzero(target_in),
                totals[5] + tf.size(source, tf.int64) + tf.size(target_in, tf.int64),
            ]
        return totals

    chunk = tf.constant(args.chunk, tf.int64)
    warm_start = time.perf_counter()
    warm_batches = 0
    while time.perf_counter() - warm_start < args.warmup:
        warm_batches += int(consume(chunk)[0])
    totals = np.zeros(6, dtype=np.int64)
    start = time.perf_counter()
    while time.perf_counter() - start < args.seconds:
        totals += np.array([int(value) for value in consume(chunk)])
    seconds = time.perf_counter() - start
    batches, pairs, target_real, target_all, both_real, both_all = (int(t) for t in totals)
    rss_after = rss_mib()
    record = {
        "variant": args.variant,
        "boundaries": boundaries,
        "full_batches_per_pass": pass_batches,
        "pairs_kept": int(counts.sum()),
        "shards": len(manifest["splits"]["train"]["shards"]),
        "import_s": round(imported - process_start, 2),
        "startup_s": round(startup, 2),
        "startup_steps_s": steps,
        "rss_start_mib": round(rss_start, 1),
        "rss_after_import_mib": round(rss_imported, 1),
        "rss_after_first_batch_mib": round(rss_first, 1),
        "batches_after_first": warm_batches + batches,
        "rss_after_batches_mib": round(rss_after, 1),
        "pipeline_own_mib": round(rss_after - rss_imported, 1),
        "rate_seconds": round(seconds, 2),
        "batches_per_s": round(batches / seconds, 1),
        "pairs_per_s": round(pairs / seconds),
        "target_tokens_per_s": round(target_real / seconds),
        "mean_pairs_per_batch": round(pairs / max(batches, 1), 1),
        "target_padding_efficiency": round(target_real / max(target_all, 1), 4),
        "padding_efficiency_source_target_in": round(both_real / max(both_all, 1), 4),
    }
    record["peak_rss_mib"] = round(peak_rss_mib(), 1)  # the pipeline's, before the stages
    if args.stages:

        def parse(records):  # prepared_dataset's parsing: a chunk of pairs an op
            chunks = records.batch(CHUNK_PAIRS)
            return chunks.map(_parse_pairs, num_parallel_calls=tf.data.AUTOTUNE)

        library = bucket_by_token_budget, parse, prepared_dataset
        record["stages_pairs_per_s"] = stage_rates(tf, args, manifest, boundaries, xla, library)
        record["target_tokens_per_pair"] = round(target_real / max(pairs, 1), 2)
        record["peak_rss_with_stage_caches_mib"] = round(peak_rss_mib(), 1)
    emit(record)


def stage_rates(tf, args, manifest, boundaries, xla, library) -> dict:
    """Pairs/s of each step of `prepared_dataset` alone, in the graph, `args.stage_seconds` each
    after a short warm-up. The harness draws every PAIR_STRIDE-th pair (every BATCH_STRIDE-th
    batch) through `Dataset.shard`, which skips the others in C++: drawing each pair through a
    graph loop would cost more than most of the steps measured. Chunks (`CHUNK_PAIRS` pairs) are
    drawn one by one."""
    bucket, parse, prepared_dataset = library
    from pipelines.batching import CHUNK_PAIRS, BatchingSettings
    from pipelines.prepared import INTERLEAVED_FILES, SHUFFLE_BUFFER

    shards = manifest["splits"]["train"]["shards"]
    files = [str(Path(args.prepared) / shard["file"]) for shard in shards]
    records = (
        tf.data.Dataset.from_tensor_slices(files)
        .shuffle(len(files), seed=args.seed)
        .repeat()
        .interleave(
            tf.data.TFRecordDataset,
            cycle_length=min(INTERLEAVED_FILES, len(files)),
            num_parallel_calls=tf.data.AUTOTUNE,
        )
    )
    parsed = parse(records)
    cached_records = records.take(STAGE_CACHE_PAIRS).cache()
    cached_chunks = parsed.take(STAGE_CACHE_PAIRS // CHUNK_PAIRS).cache()
    for cached in (cached_records, cached_chunks):  # fill the caches before timing
        cached.reduce(tf.constant(0, tf.int64), lambda count, _: count + 1)
    options = tf.data.Options()
    options.deterministic = args.seed is not None

    def full(deterministic):
        return prepared_dataset(
            args.prepared,
            "train",
            BatchingSettings(
                args.batch_tokens,
                args.max_length,
                shuffle=True,
                seed=args.seed,
                repeat=True,
                deterministic=deterministic,
                boundaries=boundaries,
                pad_batches=xla,
            ),
        )

    batching = bucket(args.batch_tokens, args.max_length, boundaries, xla)
    stages = {  # name: (dataset, what an element is)
        "read records (4 files interleaved)": (records, "pair"),
        "shuffle alone (records cached)": (
            cached_records.repeat().shuffle(SHUFFLE_BUFFER, seed=args.seed),
            "pair",
        ),
        "read + parse": (parsed, "chunk"),
        "parse alone (records cached)": (parse(cached_records.repeat()), "chunk"),
        "cached chunks alone": (cached_chunks.repeat(), "chunk"),
        "bucket alone (chunks cached)": (cached_chunks.repeat().apply(batching), "batch"),
        "full pipeline (as trainer)": (full(None), "batch"),
        "full pipeline, deterministic=False": (full(False), "batch"),
    }
    strides = {"pair": PAIR_STRIDE, "chunk": 1, "batch": BATCH_STRIDE}
    rates = {}
    for name, (dataset, element) in stages.items():
        stride = strides[element]
        dataset = dataset.with_options(options).shard(stride, 0).prefetch(tf.data.AUTOTUNE)
        drain = drainer(tf, iter(dataset), element != "pair")
        chunk = tf.constant(5, tf.int64)
        start = time.perf_counter()
        while time.perf_counter() - start < min(2.0, args.stage_seconds):
            drain(chunk)
        pairs, start = 0, time.perf_counter()
        while time.perf_counter() - start < args.stage_seconds:
            pairs += int(drain(chunk)) * stride
        rates[name] = round(pairs / (time.perf_counter() - start))
    return rates


def drainer(tf, iterator, many):
    """A tf.function that draws `count` elements of `iterator`; the pairs they hold (`many`: an
    element is a chunk or a batch of pairs, else one pair)."""

    def rows(element):
        last = tf.nest.flatten(element)[-1]
        if not many:
            return 1
        return last.nrows() if isinstance(last, tf.RaggedTensor) else tf.shape(last)[0]

    @tf.function
    def drain(count):
        pairs = tf.constant(0, tf.int64)
        for _ in tf.range(count):
            pairs += tf.cast(rows(next(iterator)), tf.int64)
        return pairs

    return drain


# The parent: corpora, children, table, records.


def targets_met(record, smallest_share) -> dict:
    met = {}
    for variant, run in record["pipeline"].items():
        met[variant] = {
            "startup_under_30s": run["startup_s"] < TARGETS["startup_s_at_4.5M"],
            "pipeline_own_ratio_to_smallest": round(
                run["pipeline_own_mib"] / smallest_share[variant], 3
            ),
            "pipeline_own_within_1.5x": run["pipeline_own_mib"]
            <= TARGETS["pipeline_own_ratio_max"] * smallest_share[variant],
            "rate_at_least_500k": run["target_tokens_per_s"] >= TARGETS["target_tokens_per_s_min"],
            "padding_at_least_0.90": run["target_padding_efficiency"]
            >= TARGETS["padding_efficiency_min"],
        }
    return met


def target_lines(records) -> str:
    """Each target, met or missed, and by how much, per size and variant."""
    lines = []
    for record in records:
        for variant, run in record["pipeline"].items():
            met = record["targets_met"][variant]
            rate, padding = run["target_tokens_per_s"], run["target_padding_efficiency"]
            lines.append(
                f"{record['pairs']} {variant}: "
                f"start-up {run['startup_s']:.1f} s (+{run['import_s']:.1f} s imports) "
                f"{'met' if met['startup_under_30s'] else 'MISSED'} (< 30 s); "
                f"own memory x{met['pipeline_own_ratio_to_smallest']:.2f} "
                f"{'met' if met['pipeline_own_within_1.5x'] else 'MISSED'} (<= 1.5); "
                f"rate {rate / TARGETS['target_tokens_per_s_min']:.2f} of 500k "
                f"{'met' if met['rate_at_least_500k'] else 'MISSED'}; "
                f"padding {padding:.3f} {'met' if met['padding_at_least_0.90'] else 'MISSED'}"
                " (>= 0.90)"
            )
    return "\n".join(lines)


def table(records) -> str:
    header = (
        f"{'pairs':>9} {'variant':>7} {'prep s':>7} {'prep p/s':>9} {'import s':>8} "
        f"{'start s':>7} {'RSS 1st':>7} {'RSS N':>7} {'peak':>7} {'own':>5} {'xown':>5} "
        f"{'tgt tok/s':>9} {'pairs/s':>8} {'pad tgt':>7} {'pad s+t':>7}"
    )
    lines = [header]
    for record in records:
        prep = record["prepare"]
        for variant, run in record["pipeline"].items():
            ratio = record["targets_met"][variant]["pipeline_own_ratio_to_smallest"]
            lines.append(
                f"{record['pairs']:>9} {variant:>7} {prep['prepare_s']:>7.1f} "
                f"{prep['prepare_pairs_per_s']:>9.0f} {run['import_s']:>8.2f} "
                f"{run['startup_s']:>7.2f} {run['rss_after_first_batch_mib']:>7.0f} "
                f"{run['rss_after_batches_mib']:>7.0f} {run['peak_rss_mib']:>7.0f} "
                f"{run['pipeline_own_mib']:>5.0f} "
                f"{ratio:>5.2f} {run['target_tokens_per_s']:>9} {run['pairs_per_s']:>8} "
                f"{run['target_padding_efficiency']:>7.3f} "
                f"{run['padding_efficiency_source_target_in']:>7.3f}"
            )
    return "\n".join(lines)


def stage_table(records) -> str:
    lines = []
    for record in records:
        for variant, run in record["pipeline"].items():
            stages = run.get("stages_pairs_per_s")
            if not stages:
                continue
            per_pair = run["target_tokens_per_pair"]
            lines.append(
                f"{record['pairs']} pairs, {variant}: full pipeline {run['pairs_per_s']} pairs/s"
            )
            for name, rate in stages.items():
                lines.append(
                    f"  {name:<38} {rate:>9} pairs/s  (= {rate * per_pair:>10.0f} target tok/s)"
                )
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[29_000, 1_000_000, 4_500_000])
    parser.add_argument("--data-dir", type=Path, default=REPO.parent / "shared/data/multi30k")
    parser.add_argument("--scratch", type=Path, help="default: a new directory under /tmp")
    parser.add_argument("--keep-scratch", action="store_true")
    parser.add_argument("--seconds", type=float, default=30.0, help="rate measured this long")
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--stage-seconds", type=float, default=5.0)
    parser.add_argument("--no-stages", dest="stages", action="store_false")
    parser.add_argument("--variants", nargs="+", default=["xla", "default"])
    parser.add_argument("--max-length", type=int, default=MAX_LENGTH)
    parser.add_argument("--vocab-size", type=int, default=VOCAB_SIZE)
    parser.add_argument("--batch-tokens", type=int, default=BATCH_TOKENS)
    parser.add_argument("--seed", type=int, default=1234, help="the trainer's default")
    parser.add_argument("--chunk", type=int, default=50, help="batches per tf.function call")
    parser.add_argument("--out", type=Path)
    # The subprocesses.
    parser.add_argument("--child", choices=["prepare", "pipeline"], help=argparse.SUPPRESS)
    parser.add_argument("--source", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--target", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--output", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--prepared", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--variant", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child == "prepare":
        return child_prepare(args)
    if args.child == "pipeline":
        return child_pipeline(args)

    now = datetime.datetime.now(datetime.UTC)
    out = args.out or REPO / f"benchmarks/results/data-scale-{now:%Y-%m-%dT%H%MZ}.jsonl"
    existed = args.scratch is not None and args.scratch.exists()
    scratch = args.scratch or Path(tempfile.mkdtemp(prefix="data-scale-", dir="/tmp"))
    scratch.mkdir(parents=True, exist_ok=True)
    made = []
    log = (scratch / "children.log").open("w")
    common = {
        "date": now.isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "machine": machine(),
        "settings": {
            "max_length": args.max_length,
            "vocab_size": args.vocab_size,
            "batch_tokens": args.batch_tokens,
            "seed": args.seed,
            "warmup_s": args.warmup,
            "seconds": args.seconds,
            "stage_seconds": args.stage_seconds if args.stages else None,
            "xla_buckets": XLA_BUCKETS,
        },
        "targets": TARGETS,
    }
    records = []
    try:
        for size in args.sizes:
            start = time.perf_counter()
            source, target, how = corpus_files(size, args.data_dir, scratch)
            built = time.perf_counter() - start
            if source.parent != args.data_dir:
                made.append(source.parent)
            prepared = scratch / f"prepared-{size}"
            for leftover in (prepared, prepared.with_name(prepared.name + ".partial")):
                shutil.rmtree(leftover, ignore_errors=True)
            made.append(prepared)
            print(f"{size} pairs: corpus in {built:.1f} s; preparing", flush=True)
            prep = run_child(
                [
                    "--child=prepare",
                    f"--source={source}",
                    f"--target={target}",
                    f"--output={prepared}",
                    f"--max-length={args.max_length}",
                    f"--vocab-size={args.vocab_size}",
                ],
                log,
            )
            prep["prepare_pairs_per_s"] = round(size / prep["prepare_s"])
            print(f"  prepare {prep['prepare_s']} s {prep['stages_s']}", flush=True)
            pipeline = {}
            for variant in args.variants:
                pipeline[variant] = run_child(
                    [
                        "--child=pipeline",
                        f"--prepared={prepared}",
                        f"--variant={variant}",
                        f"--max-length={args.max_length}",
                        f"--batch-tokens={args.batch_tokens}",
                        f"--seed={args.seed}",
                        f"--seconds={args.seconds}",
                        f"--warmup={args.warmup}",
                        f"--stage-seconds={args.stage_seconds}",
                        f"--chunk={args.chunk}",
                        *([] if args.stages else ["--no-stages"]),
                    ],
                    log,
                )
                run = pipeline[variant]
                print(
                    f"  {variant}: start-up {run['startup_s']} s, "
                    f"{run['target_tokens_per_s']} target tok/s, "
                    f"padding {run['target_padding_efficiency']}, peak {run['peak_rss_mib']} MiB",
                    flush=True,
                )
            records.append(
                {
                    "benchmark": "data_scale",
                    "pairs": size,
                    "corpus": {"how": how, "files": [str(source), str(target)]},
                    **common,
                    "prepare": prep,
                    "pipeline": pipeline,
                }
            )
    finally:
        log.close()
        if not args.keep_scratch:
            for path in made:
                shutil.rmtree(path, ignore_errors=True)
            if not existed:
                shutil.rmtree(scratch, ignore_errors=True)
    smallest = {
        variant: records[0]["pipeline"][variant]["pipeline_own_mib"] for variant in args.variants
    }
    for record in records:
        record["targets_met"] = targets_met(record, smallest)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w") as file:
        file.writelines(json.dumps(record) + "\n" for record in records)
    print(table(records))
    print(target_lines(records))
    if args.stages:
        print(stage_table(records))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
