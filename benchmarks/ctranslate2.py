"""Our beam search against CTranslate2 on the same weights: throughput, latency, BLEU, size, memory.

Table: docs/PERFORMANCE.md#ctranslate2-against-our-beam-search.

One trained run (`--model`), Multi30k test_2016_flickr (1,000 sentences), beam 4, α 0.6, and the
same number of threads for every engine (`--threads`, 2 by default):

- `keras`: `Translator`, the search a `tf.function` (`translate`, `evaluate`): each sentence
  leaves the batch once its best translation is final;
- `keras-xla`: the same compiled by XLA (`--jit-compile`), which needs fixed shapes: every
  sentence of a slice runs until the last is done;
- `saved-model`: `export`'s SavedModel, its `serving_default` signature (strings in and out);
- `ct2-float32`, `ct2-int8`: `export --format ctranslate2 [--quantization int8]`, run by
  `ctranslate2.Translator`, α as its length penalty (|Y|^α, not GNMT's ((5 + |Y|) / 6)^α:
  docs/CTRANSLATE2.md).

Each engine runs in a fresh child process (its own peak RSS, VmHWM). For each, beam-4 throughput in
target tokens/s at batch 1 (the first `--batch1-sentences`, one call each: batch 1 over all
1,000 would take most of the budget), 16 and 64 (all sentences, sorted by length into batches, as
`Translator` and CTranslate2 both batch); the median latency of the batch-1 calls; sacreBLEU of
the batch-64 output; the size on disk of what the engine loads; peak RSS. Target tokens are the
outputs' subword pieces, counted by the run's SentencePiece model for every engine alike (no
EOS). Before each measured pass, one batch of each padded shape it will meet is decoded, so XLA
compiles there and not on the clock.

    .venv/bin/python benchmarks/ctranslate2.py --model RUN [--threads 2] [--batch1-sentences 100]
        [--out benchmarks/results/ctranslate2-<UTC stamp>.jsonl]
"""

import argparse
import collections
import datetime
import gzip
import json
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

from records import (
    SPEED_COLUMNS,
    child_record,
    machine,
    markdown_table,
    peak_rss_mib,
    put_checkout_first,
)

REPO = Path(__file__).resolve().parent.parent
put_checkout_first(REPO)  # `import ctranslate2` then finds the engine, not this directory's script

ENGINES = ("keras", "keras-xla", "saved-model", "ct2-float32", "ct2-int8")
BATCH_SIZES = (1, 16, 64)
RESULT_TAG = "CTRANSLATE2_RESULT "
# A run's files (keras_transformer.run_directory's names; not imported here, since the package
# loads TensorFlow, which would swell CTranslate2's memory figures).
SUBWORDS, CONFIG = "subwords.model", "config.json"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True, help="a trained run directory")
    parser.add_argument("--data-dir", type=Path, default=REPO.parent / "shared/data/multi30k")
    parser.add_argument("--split", default="test_2016_flickr")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch1-sentences", type=int, default=100)
    parser.add_argument("--sentences", type=int, help="only the first N (a quick trial)")
    parser.add_argument("--engines", nargs="+", choices=ENGINES, default=list(ENGINES))
    parser.add_argument("--out", type=Path)
    parser.add_argument(
        "--profile",
        type=int,
        metavar="BATCH",
        help="instead: where our XLA beam search spends one batch of BATCH sentences",
    )
    parser.add_argument("--engine", choices=ENGINES, help=argparse.SUPPRESS)  # a child's
    parser.add_argument("--path", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--outputs", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.engine:
        measure_engine(args)
    elif args.profile:
        profile(args)
    else:
        compare(args)


# The parent: exports, one child per engine, BLEU, the record and the table.


def compare(args):
    sources, references = (
        read_split(args, language)[: args.sentences] for language in ("en", "de")
    )
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        paths = export_all(args.model, scratch, args.engines)
        records = []
        for engine in args.engines:
            outputs = scratch / f"{engine}.json"
            record = run_child(args, engine, paths[engine], outputs)
            translations = json.loads(outputs.read_text(encoding="utf-8"))
            record["outputs"] = translations
            records.append(record)
    add_bleu_and_agreement(records, references)
    now = datetime.datetime.now(datetime.UTC)
    out = args.out or REPO / f"benchmarks/results/ctranslate2-{now:%Y-%m-%dT%H%MZ}.jsonl"
    with out.open("w", encoding="utf-8") as file:
        for record in records:
            del record["outputs"]
            record.update(run=str(args.model), split=args.split, sentences=len(sources))
            record.update(machine(), utc=f"{now:%Y-%m-%dT%H:%MZ}")
            file.write(json.dumps(record) + "\n")
    print(markdown_table(records, TABLE_COLUMNS))
    print(f"wrote {out}")


def export_all(run_dir: Path, scratch: Path, engines) -> dict:
    """What each engine loads: the run itself, a SavedModel, CTranslate2 directories."""
    from keras_transformer import runtime

    runtime.configure()
    from keras_transformer.decoding.translator import load_run
    from keras_transformer.export.ctranslate2_export import export_ctranslate2
    from keras_transformer.export.saved_model import export_saved_model

    translator = load_run(run_dir)
    paths = {"keras": run_dir, "keras-xla": run_dir}
    if "saved-model" in engines:
        paths["saved-model"] = export_saved_model(translator, scratch / "saved_model")
    for quantization in ("float32", "int8"):
        if f"ct2-{quantization}" in engines:
            paths[f"ct2-{quantization}"] = export_ctranslate2(
                translator, scratch / f"ct2-{quantization}", quantization
            )
    return paths


def run_child(args, engine, path, outputs) -> dict:
    command = [
        sys.executable,
        __file__,
        *("--engine", engine, "--path", str(path), "--outputs", str(outputs)),
        *("--model", str(args.model), "--data-dir", str(args.data_dir), "--split", args.split),
        *("--threads", str(args.threads), "--batch1-sentences", str(args.batch1_sentences)),
        *(("--sentences", str(args.sentences)) if args.sentences else ()),
    ]
    return child_record(engine, command, RESULT_TAG, REPO)


def add_bleu_and_agreement(records, references):
    """sacreBLEU of each engine's batch-64 output, and how many of its sentences equal
    `keras-xla`'s (or the first engine's) translation."""
    import sacrebleu

    reference = next((r for r in records if r["engine"] == "keras-xla"), records[0])
    for record in records:
        outputs = record["outputs"]
        record["sacrebleu"] = round(sacrebleu.corpus_bleu(outputs, [references]).score, 2)
        same = sum(a == b for a, b in zip(outputs, reference["outputs"], strict=True))
        record[f"same_as_{reference['engine']}"] = same


TABLE_COLUMNS = {
    **SPEED_COLUMNS,
    "sacreBLEU": lambda r: f"{r['sacrebleu']:.2f}",
    "size": lambda r: f"{r['size_mib']:.1f} MiB",
    "peak RSS": lambda r: f"{r['peak_rss_mib']:,.0f} MiB",
}


# A child: one engine, every batch size.


def measure_engine(args):
    """Measures one engine in this process; its imports are that engine's alone."""
    import sentencepiece

    sources = read_split(args, "en")[: args.sentences]
    subwords = sentencepiece.SentencePieceProcessor(model_file=str(args.model / SUBWORDS))
    max_length = json.loads((args.model / CONFIG).read_text())["max_length"]
    translate, padded_width = ENGINE_LOADERS[args.engine.split("-")[0]](args, subwords, max_length)
    record = {"engine": args.engine, "threads": args.threads, "size_mib": size_mib(args)}
    for batch in BATCH_SIZES:
        subset = sources[: args.batch1_sentences] if batch == 1 else sources
        start = time.perf_counter()
        record[f"warm_up_calls_b{batch}"] = warm_up(
            translate, subset, batch, subwords, padded_width, max_length
        )
        record[f"warm_up_s_b{batch}"] = round(time.perf_counter() - start, 1)
        outputs, seconds, latencies = timed_pass(translate, subset, batch)
        tokens = sum(len(ids) for ids in subwords.encode(outputs))
        record[f"tokens_per_s_b{batch}"] = round(tokens / seconds, 1)
        record[f"seconds_b{batch}"] = round(seconds, 2)
        record[f"sentences_b{batch}"] = len(subset)
        if batch == 1:
            record["p50_ms_b1"] = round(1000 * statistics.median(latencies), 1)
    args.outputs.write_text(json.dumps(outputs, ensure_ascii=False), encoding="utf-8")
    record["peak_rss_mib"] = peak_rss_mib()
    print(RESULT_TAG + json.dumps(record), flush=True)


def read_split(args, language) -> list[str]:
    with gzip.open(args.data_dir / f"{args.split}.{language}.gz", "rt", encoding="utf-8") as f:
        return [line.strip() for line in f]


def size_mib(args) -> float:
    """The bytes the engine loads: the run's config, weights and subword model, or the export."""
    if args.engine.startswith("keras"):
        files = [args.weights, args.model / SUBWORDS, args.model / CONFIG]
    else:
        files = [p for p in args.path.rglob("*") if p.is_file()]
    return round(sum(p.stat().st_size for p in files) / 2**20, 2)


def tensorflow_threads(threads):
    """TensorFlow as the CLI sets it up, with `threads` intra-op and inter-op threads; and the
    padded source width of `Translator` and the SavedModel, which they compile for."""
    from keras_transformer import runtime

    runtime.configure()
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(threads)
    from keras_transformer.decoding.translator import bucketed_width

    return bucketed_width


def keras_engine(args, subwords, max_length):
    padded_width = tensorflow_threads(args.threads)
    from keras_transformer.decoding.translator import load_run
    from keras_transformer.search_settings import SearchSettings

    translator = load_run(args.model, jit_compile=args.engine == "keras-xla")
    args.weights = translator.weights_path

    def translate(sentences, batch):
        return translator.translate(
            sentences, SearchSettings(), batch_sentences=batch, progress=False
        )

    return translate, padded_width


def saved_model_engine(args, subwords, max_length):
    padded_width = tensorflow_threads(args.threads)
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the SentencePiece ops)

    serve = tf.saved_model.load(str(args.path)).signatures["serving_default"]

    def translate(sentences, batch):
        outputs = [None] * len(sentences)
        for indices in length_sorted_batches(sentences, batch, subwords):
            result = serve(text=tf.constant([sentences[i] for i in indices]))
            for i, text in zip(indices, result["translations"].numpy(), strict=True):
                outputs[i] = text.decode("utf-8")
        return outputs

    return translate, padded_width


def ct2_engine(args, subwords, max_length):
    import ctranslate2

    from keras_transformer.search_settings import SearchSettings

    search = SearchSettings()  # §6.1's, as our engines search
    engine = ctranslate2.Translator(
        str(args.path), device="cpu", inter_threads=1, intra_threads=args.threads
    )

    def translate(sentences, batch):
        pieces = subwords.encode(sentences, out_type=str)
        results = engine.translate_batch(
            pieces,
            max_batch_size=batch,
            beam_size=search.beam_size,
            length_penalty=search.alpha,
            max_input_length=max_length,  # our Translator truncates there too
            # One limit per call: the longest source + 50, at most the positions there are.
            max_decoding_length=min(max(map(len, pieces)) + 1 + search.extra_length, max_length),
            min_decoding_length=0,
        )
        return subwords.decode([result.hypotheses[0] for result in results])

    return translate, None  # nothing to compile: one warm-up batch


ENGINE_LOADERS = {"keras": keras_engine, "saved": saved_model_engine, "ct2": ct2_engine}


def length_sorted_batches(sentences, batch, subwords):
    """Indices of `sentences` sorted by subword length and cut into batches of `batch`."""
    lengths = [len(ids) for ids in subwords.encode(sentences)]
    order = sorted(range(len(sentences)), key=lengths.__getitem__)
    return [order[i : i + batch] for i in range(0, len(order), batch)]


def warm_up(translate, sentences, batch, subwords, padded_width, max_length):
    """Decodes one batch of each padded shape (rows, `padded_width` of the longest source) that
    a pass over `sentences` in batches of `batch` meets: each compilation happens here. Without
    `padded_width`, the first batch alone."""
    lengths = [len(ids) + 1 for ids in subwords.encode(sentences)]  # + EOS
    shapes = {}
    for indices in length_sorted_batches(sentences, batch, subwords):
        longest = max(lengths[i] for i in indices)
        width = padded_width(longest, limit=max_length) if padded_width else None
        shapes.setdefault((len(indices), width), indices)
    calls = list(shapes.values())[: None if padded_width else 1]
    for indices in calls:
        translate([sentences[i] for i in indices], batch)
    return len(calls)


def timed_pass(translate, sentences, batch):
    """The outputs, the pass's seconds, and each call's seconds (batch 1: one per sentence)."""
    if batch > 1:
        start = time.perf_counter()
        outputs = translate(sentences, batch)
        return outputs, time.perf_counter() - start, []
    outputs, latencies = [], []
    for sentence in sentences:
        start = time.perf_counter()
        outputs += translate([sentence], 1)
        latencies.append(time.perf_counter() - start)
    return outputs, sum(latencies), latencies


# --profile: our search on one batch.


def profile(args):
    """Prints, for the middle batch of `--profile` sentences of the length-sorted split: the
    steps our beam search's loop ran over the whole batch (as under XLA), the hypothesis-steps
    computed when sentences leave the batch as they finish, the steps its sentences needed
    (their output lengths with EOS), the cache length every step attends over; then for each
    of our searches, the plain `Translator` and the XLA-compiled one, the wall time of a call
    and the thread time of its ops (tf.profiler; `profile_step.py`'s reading), grouped by
    TensorFlow op type or HLO op."""
    from profile_step import xla_flags

    tensorflow_threads(args.threads)
    os.environ["XLA_FLAGS"] = xla_flags(None)  # read at XLA's first compilation
    import tensorflow as tf

    from keras_transformer.decoding.search import max_decode_length
    from keras_transformer.decoding.translator import load_run, pad_to_bucket
    from keras_transformer.search_settings import SearchSettings

    translator = load_run(args.model)
    max_length = translator.model.config.max_length
    sentences = read_split(args, "en")
    batches = length_sorted_batches(sentences, args.profile, sentencepiece_of(args))
    batch = [sentences[i] for i in batches[len(batches) // 2]]
    source_ids = pad_to_bucket(translator.encode_sentences(batch), limit=max_length)
    search = SearchSettings()
    steps, compacted_rows, target_ids = loop_steps(translator, source_ids, search)
    needed = [len(until_eos(row)) for row in target_ids.numpy().tolist()]
    summary = {
        "sentences": len(batch),
        "source_width": source_ids.shape[1],
        "cache_positions": max_decode_length(
            translator.model, tf.constant(source_ids), search.extra_length
        ),
        "loop_steps": steps,
        "longest_output": max(needed),
        "mean_output": round(statistics.mean(needed), 1),
        "hypothesis_steps_run": steps * len(batch) * search.beam_size,
        "hypothesis_steps_compacted": compacted_rows,
        "hypothesis_steps_needed": sum(needed) * search.beam_size,
    }
    print(json.dumps(summary))
    for engine, jit_compile in (("keras", False), ("keras-xla", True)):
        call_ms, op_ms = profiled_calls(translator, source_ids, jit_compile)
        print(f"{engine}: {call_ms:.1f} ms a call; thread time by op, ms a call")
        for name, ms in op_ms.most_common(20):
            print(f"  {name[:48]:<48} {ms:9.1f}")


def profiled_calls(translator, source_ids, jit_compile, calls=3):
    """The mean wall time (ms) of `calls` decodings of `source_ids` by a `Translator` after
    two warm-up calls, and the thread time (ms a call) of its ops by type."""
    import tensorflow as tf
    from profile_step import op_times

    from keras_transformer.decoding.translator import Translator

    search = Translator(translator.model, translator.tokenizer, jit_compile=jit_compile)
    for _ in range(2):  # traces (compiles), warms up
        search.decode_ids(source_ids)
    logdir = Path(tempfile.mkdtemp(prefix="kt-beam-profile-"))
    tf.profiler.experimental.start(str(logdir))
    start = time.perf_counter()
    for _ in range(calls):
        search.decode_ids(source_ids)
    call_ms = 1000 * (time.perf_counter() - start) / calls
    tf.profiler.experimental.stop()
    by_op = collections.Counter()
    for name, ms in op_times(logdir).items():
        by_op[op_kind(name)] += ms / calls
    return call_ms, by_op


def op_kind(event_name):
    """A TensorFlow op's type (`.../while/TopKV2:TopKV2` → `TopKV2`), or an HLO op's name
    without its number (`fusion.12` → `fusion`); host events as they are."""
    if "/" in event_name and ":" in event_name:
        return event_name.rsplit(":", 1)[1]
    return re.sub(r"\.\d+$", "", event_name)


def sentencepiece_of(args):
    import sentencepiece

    return sentencepiece.SentencePieceProcessor(model_file=str(args.model / SUBWORDS))


def loop_steps(translator, source_ids, search):
    """The steps our beam search's loop runs on `source_ids` (one slice, no XLA, the whole
    batch until its last sentence is done, `BeamSearchResult.steps`), the hypothesis-steps the
    search computes when sentences leave the batch as they finish (`Translator` without XLA,
    its `hypothesis_steps`), and the best target ids."""
    import tensorflow as tf

    from keras_transformer.decoding.search import beam_decode
    from keras_transformer.decoding.translator import Translator

    model = translator.model
    values = search.beam_size, search.alpha, search.extra_length
    whole_batch = tf.function(beam_decode)(model, tf.constant(source_ids), *values)
    plain = Translator(model, translator.tokenizer, slices=1)
    target_ids, _ = plain.decode_ids(source_ids, search)
    return int(whole_batch.steps[0]), plain.hypothesis_steps, target_ids


def until_eos(ids):
    """Generated ids up to EOS, included (PAD after it)."""
    from pipelines.tokenizer import EOS_ID

    return ids[: ids.index(EOS_ID) + 1] if EOS_ID in ids else ids


if __name__ == "__main__":
    main()
