"""Beam search on a pretrained-model-sized Marian checkpoint: ours against transformers and
CTranslate2, target tokens/s and peak memory.

Table: docs/PRETRAINED_PERFORMANCE.md#speed-against-transformers-and-ctranslate2.

The checkpoint is OPUS-MT en-de's shape with random weights: `base` (6+6 layers, d_model 512, 8
heads, d_ff 2048), swish, a shared vocabulary of 58,101 pieces whose last is `<pad>`, EOS id 0,
built by transformers' PyTorch `MarianMTModel` and written with `save_pretrained`. Its two
SentencePiece models are trained here on Multi30k (EN source, DE target, `--pieces` each); the
rest of the vocabulary is filler pieces, which only the output projection and the embedding
meet. The same directory is then

- `keras`, `keras-xla`, `saved-model`: imported with `keras-transformer import`, decoded by
  `Translator` (`translate`), the same compiled by XLA (`--jit-compile`), and its SavedModel's
  `serving_default`;
- `litert-float32`, `litert-int8`, `litert-int8-batch16`: its TFLite export (`export --format
  tflite`, int8 weights by dynamic-range quantization: `--quantize dynamic`), run by
  `TFLiteTranslator` on LiteRT's XNNPACK kernels, what `translate --model x.tflite` and a
  server's LiteRT version run. The batch is fixed at export: one sentence a call (batches of 16
  and 64 are sentences in turn), or 16 (`--batch-size 16`: a batch of 1 is filled to 16 with
  copies of it, a batch of 64 is four calls);
- `torch`: transformers' `generate()`;
- `ct2-float32`, `ct2-int8`: converted by CTranslate2's own converter
  (`ct2-transformers-converter --quantization`), run by `ctranslate2.Translator`.

Every engine gets the same Multi30k sentences, each of exactly `--source-length` source pieces
with EOS, and decodes exactly `--target-length` target tokens a sentence with beam 4: the minimum
length equals the maximum (ours `min_length`, transformers `min_new_tokens`, CTranslate2
`min_decoding_length`), so a random model's early EOS stops none of them sooner. Beam 4 at
batch 1 (the first `--batch1-sentences`, one call each), 16 and 64 (`--sentences`), the same
number of threads for every engine (`--threads`). Ours trace (XLA: compile) a search per batch
shape, so one batch of each size is decoded before its measured pass; the others warm up once,
on one batch of one sentence. Each engine runs in a child process of its own (its own peak
RSS, VmHWM); transformers, CTranslate2 and its converter run in `--reference-python`, the
reference virtual environment (benchmarks/requirements-reference.txt), transformers with
`OMP_WAIT_POLICY=PASSIVE` (`run_child`). Tokens/s counts the target tokens each engine
returned, checked to be `--target-length` a sentence (ours: on their warm-up batch's ids).

    .venv/bin/python benchmarks/pretrained.py [--threads 2] [--sentences 128]
        [--batch1-sentences 8] [--source-length 16] [--target-length 16]
        [--reference-python ../venv-reference/bin/python]
        [--out benchmarks/results/pretrained-<UTC stamp>.jsonl]
    .venv/bin/python benchmarks/pretrained.py --profile 64   # where a batch goes (ours, LiteRT)
"""

import argparse
import collections
import datetime
import gzip
import json
import os
import re
import signal
import statistics
import subprocess
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

ENGINES = (
    "keras",
    "keras-xla",
    "saved-model",
    "litert-float32",
    "litert-int8",
    "litert-int8-batch16",
    "torch",
    "ct2-float32",
    "ct2-int8",
)
# Each TFLite export's weights (`--quantize`) and batch (`--batch-size`).
LITERT_EXPORTS = {
    "litert-float32": (None, 1),
    "litert-int8": ("dynamic", 1),
    "litert-int8-batch16": ("dynamic", 16),
}
REFERENCE_ENGINES = ("torch", "ct2-float32", "ct2-int8")  # run in --reference-python
# Traced (with XLA: compiled) once per batch shape, so warmed up at every batch size; the others
# once, before batch 1.
TRACED_ENGINES = ("keras", "keras-xla", "saved-model")
BATCH_SIZES = (1, 16, 64)
BEAM_SIZE = 4
RESULT_TAG = "PRETRAINED_RESULT "
# OPUS-MT en-de (Helsinki-NLP/opus-mt-en-de): its shape and special ids.
VOCAB_SIZE = 58101
EOS_PIECE, UNK_PIECE, PAD_PIECE = "</s>", "<unk>", "<pad>"
MARIAN_SHAPE = {
    "d_model": 512,
    "encoder_layers": 6,
    "decoder_layers": 6,
    "encoder_attention_heads": 8,
    "decoder_attention_heads": 8,
    "encoder_ffn_dim": 2048,
    "decoder_ffn_dim": 2048,
    "activation_function": "swish",
    "max_position_embeddings": 512,
    "scale_embedding": True,
    "share_encoder_decoder_embeddings": True,
    "tie_word_embeddings": True,
    "vocab_size": VOCAB_SIZE,
    "decoder_vocab_size": VOCAB_SIZE,
    "eos_token_id": 0,
    "forced_eos_token_id": 0,
    "pad_token_id": VOCAB_SIZE - 1,
    "decoder_start_token_id": VOCAB_SIZE - 1,
}
CHECKPOINT, RUN, SAVED_MODEL = "opus-mt-shaped", "imported", "saved_model"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=REPO.parent / "shared/data/multi30k")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--sentences", type=int, default=128, help="for batches 16 and 64")
    parser.add_argument("--batch1-sentences", type=int, default=8)
    parser.add_argument("--source-length", type=int, default=16, help="pieces with EOS")
    parser.add_argument("--target-length", type=int, default=16, help="tokens decoded")
    parser.add_argument("--pieces", type=int, default=4000, help="each SentencePiece model's")
    parser.add_argument("--engines", nargs="+", choices=ENGINES, default=list(ENGINES))
    parser.add_argument(
        "--reference-python", type=Path, default=REPO.parent / "venv-reference/bin/python"
    )
    parser.add_argument("--workdir", type=Path, help="keep the models here (default: a temp dir)")
    parser.add_argument("--out", type=Path)
    parser.add_argument(
        "--profile", type=int, metavar="BATCH", help="instead: where our search spends a batch"
    )
    # A child's: one engine, or the checkpoint built in the reference environment.
    parser.add_argument("--engine", choices=ENGINES, help=argparse.SUPPRESS)
    parser.add_argument("--build-checkpoint", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--path", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--sources", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.build_checkpoint:
        build_checkpoint(args.build_checkpoint)
    elif args.engine:
        measure_engine(args)
    else:
        with tempfile.TemporaryDirectory() as scratch:
            workdir = args.workdir or Path(scratch)
            workdir.mkdir(parents=True, exist_ok=True)
            (profile if args.profile else compare)(args, workdir)


# The parent: the checkpoint and its conversions, one child per engine, the record.


def compare(args, workdir: Path):
    paths, sources_path = prepare_models(args, workdir)
    records = [run_child(args, engine, paths[engine], sources_path) for engine in args.engines]
    now = datetime.datetime.now(datetime.UTC)
    out = args.out or REPO / f"benchmarks/results/pretrained-{now:%Y-%m-%dT%H%MZ}.jsonl"
    shape = {k: MARIAN_SHAPE[k] for k in ("d_model", "encoder_layers", "activation_function")}
    with out.open("w", encoding="utf-8") as file:
        for record in records:
            record.update(
                checkpoint=dict(shape, vocab_size=VOCAB_SIZE),
                beam_size=BEAM_SIZE,
                source_length=args.source_length,
                target_length=args.target_length,
                sentences=args.sentences,
                batch1_sentences=args.batch1_sentences,
            )
            record.update(machine(), utc=f"{now:%Y-%m-%dT%H:%MZ}")
            file.write(json.dumps(record) + "\n")
    print(markdown_table(records, TABLE_COLUMNS))
    print(f"wrote {out}")


def prepare_models(args, workdir: Path):
    """The checkpoint, what each engine loads, and the sources (a JSON file): built once per
    `--workdir`."""
    checkpoint, run, saved_model = workdir / CHECKPOINT, workdir / RUN, workdir / SAVED_MODEL
    if not (checkpoint / "config.json").is_file():
        checkpoint.mkdir(parents=True, exist_ok=True)
        train_tokenizers(args, checkpoint)
        write_vocabulary(checkpoint)
        reference(args, "--build-checkpoint", str(checkpoint))
    sources_path = workdir / "sources.json"
    sources = same_length_sentences(args, checkpoint)
    sources_path.write_text(json.dumps(sources, ensure_ascii=False), encoding="utf-8")
    if not run.is_dir():
        from keras_transformer import cli

        cli.main(["import", str(checkpoint), "--output", str(run)])
    paths = {"keras": run, "keras-xla": run, "saved-model": saved_model, "torch": checkpoint}
    if "saved-model" in args.engines and not saved_model.is_dir():
        export_saved_model(args, run, saved_model)
    for engine, (quantize, batch_size) in LITERT_EXPORTS.items():
        paths[engine] = workdir / engine
        if engine in args.engines and not paths[engine].is_dir():
            export_litert(args, run, paths[engine], quantize, batch_size)
    for quantization in ("float32", "int8"):
        converted = paths[f"ct2-{quantization}"] = workdir / f"ct2-{quantization}"
        if f"ct2-{quantization}" in args.engines and not converted.is_dir():
            converter = args.reference_python.parent / "ct2-transformers-converter"
            command = [converter, "--model", checkpoint, "--output_dir", converted]
            subprocess.run([*map(str, command), "--quantization", quantization], check=True)
    return paths, sources_path


def train_tokenizers(args, checkpoint: Path):
    """source.spm (EN) and target.spm (DE), unigram models of `--pieces` pieces over Multi30k's
    training split, with Marian's special pieces."""
    import sentencepiece

    for name, language in (("source.spm", "en"), ("target.spm", "de")):
        with gzip.open(args.data_dir / f"train.{language}.gz", "rt", encoding="utf-8") as f:
            sentences = [line.strip() for line in f]
        prefix = checkpoint / name.removesuffix(".spm")
        sentencepiece.SentencePieceTrainer.train(
            sentence_iterator=iter(sentences),
            model_prefix=str(prefix),
            vocab_size=args.pieces,
            unk_id=0,
            bos_id=-1,
            eos_id=1,
            pad_id=-1,
            eos_piece=EOS_PIECE,
            minloglevel=2,
        )
        prefix.with_suffix(".model").rename(checkpoint / name)
        prefix.with_suffix(".vocab").unlink()


def write_vocabulary(checkpoint: Path):
    """vocab.json as OPUS-MT's: `</s>` 0, `<unk>` 1, the pieces of both SentencePiece models,
    filler pieces up to `VOCAB_SIZE`, and `<pad>` last."""
    import sentencepiece

    pieces = [EOS_PIECE, UNK_PIECE]
    for name in ("source.spm", "target.spm"):
        model = sentencepiece.SentencePieceProcessor(model_file=str(checkpoint / name))
        pieces += [model.id_to_piece(i) for i in range(model.get_piece_size())]
    pieces = list(dict.fromkeys(pieces))
    pieces += [f"▁filler{i}" for i in range(VOCAB_SIZE - 1 - len(pieces))]
    vocabulary = {piece: i for i, piece in enumerate([*pieces, PAD_PIECE])}
    assert len(vocabulary) == VOCAB_SIZE
    (checkpoint / "vocab.json").write_text(json.dumps(vocabulary, ensure_ascii=False))
    (checkpoint / "tokenizer_config.json").write_text(
        json.dumps({"source_lang": "en", "target_lang": "de", "model_max_length": 512})
    )


def build_checkpoint(checkpoint: Path):
    """In the reference environment: `MarianMTModel` of `MARIAN_SHAPE`, random weights (seed 0),
    saved next to its tokenizer files."""
    import torch
    from transformers import MarianConfig, MarianMTModel

    torch.manual_seed(0)
    model = MarianMTModel(MarianConfig(**MARIAN_SHAPE)).eval()
    model.save_pretrained(checkpoint)


def reference(args, *arguments):
    subprocess.run([str(args.reference_python), __file__, *arguments], check=True, cwd=REPO)


def same_length_sentences(args, checkpoint: Path) -> list[str]:
    """`--sentences` Multi30k sentences (test, then validation, then training) of exactly
    `--source-length` source pieces with EOS."""
    import sentencepiece

    model = sentencepiece.SentencePieceProcessor(model_file=str(checkpoint / "source.spm"))
    chosen = []
    for split in ("test_2016_flickr", "val", "train"):
        with gzip.open(args.data_dir / f"{split}.en.gz", "rt", encoding="utf-8") as f:
            sentences = [line.strip() for line in f]
        lengths = [len(ids) + 1 for ids in model.encode(sentences)]
        chosen += [s for s, n in zip(sentences, lengths, strict=True) if n == args.source_length]
        if len(chosen) >= args.sentences:
            return chosen[: args.sentences]
    raise SystemExit(f"only {len(chosen)} sentences of {args.source_length} pieces")


def search_settings(args):
    """Ours: beam 4, every output `--target-length` long (the limit = source + extra)."""
    from keras_transformer.search_settings import SearchSettings

    return SearchSettings(
        beam_size=BEAM_SIZE,
        extra_length=args.target_length - args.source_length,
        min_length=args.target_length,
    )


def export_saved_model(args, run: Path, saved_model: Path):
    from keras_transformer import runtime

    runtime.configure()
    from keras_transformer.decoding.translator import load_run
    from keras_transformer.export.saved_model import export_saved_model

    export_saved_model(load_run(run), saved_model, search_settings(args))


def export_litert(args, run: Path, base: Path, quantize, batch_size):
    """Version 1 of `base`: the TFLite export, with the sources' width and ours search."""
    from keras_transformer.decoding.translator import load_run
    from keras_transformer.export.tflite import export_tflite

    translator = load_run(run)
    search = search_settings(args)
    export_tflite(translator, base, quantize, args.source_length, search, batch_size=batch_size)


def run_child(args, engine, path, sources_path) -> dict:
    python = args.reference_python if engine in REFERENCE_ENGINES else Path(sys.executable)
    command = [
        *(str(python), __file__, "--engine", engine, "--path", str(path)),
        *("--sources", str(sources_path), "--threads", str(args.threads)),
        *("--sentences", str(args.sentences), "--batch1-sentences", str(args.batch1_sentences)),
        *("--source-length", str(args.source_length)),
        *("--target-length", str(args.target_length)),
    ]
    # PyTorch's OpenMP threads spin while they wait: on shared cores, a batch of one then
    # decoded ten times slower than with the passive policy, which is what it gets.
    environment = dict(os.environ, **({"OMP_WAIT_POLICY": "PASSIVE"} if engine == "torch" else {}))
    return child_record(engine, command, RESULT_TAG, REPO, environment)


TABLE_COLUMNS = {
    **SPEED_COLUMNS,
    "size": lambda r: f"{r['size_mib']:,.0f} MiB",
    "peak RSS": lambda r: f"{r['peak_rss_mib']:,} MiB",
}


# A child: one engine, every batch size.


def measure_engine(args):
    """Measures one engine in this process; its imports are that engine's alone. An engine's
    `translate(sentences, batch)` returns each sentence's output token count."""
    sentences = json.loads(args.sources.read_text(encoding="utf-8"))
    translate = ENGINE_LOADERS[args.engine](args)
    record = {"engine": args.engine, "threads": args.threads, "size_mib": size_mib(args)}
    record["load_average_before"] = os.getloadavg()[0]
    for batch in BATCH_SIZES:
        subset = sentences[: args.batch1_sentences if batch == 1 else args.sentences]
        lengths, latencies = [], []
        if batch == 1 or args.engine in TRACED_ENGINES:
            start = time.perf_counter()
            lengths += translate(subset[:batch], batch)  # checked with the measured ones
            record[f"warm_up_s_b{batch}"] = round(time.perf_counter() - start, 1)
        for i in range(0, len(subset), batch):
            start = time.perf_counter()
            lengths += translate(subset[i : i + batch], batch)
            latencies.append(time.perf_counter() - start)
        if set(lengths) != {args.target_length}:
            raise SystemExit(f"{args.engine} output lengths {sorted(set(lengths))}")
        record[f"tokens_per_s_b{batch}"] = round(
            args.target_length * len(subset) / sum(latencies), 1
        )
        record[f"seconds_b{batch}"] = round(sum(latencies), 2)
        if batch == 1:
            record["p50_ms_b1"] = round(1000 * statistics.median(latencies), 1)
    record["load_average_after"] = os.getloadavg()[0]
    record["peak_rss_mib"] = peak_rss_mib()
    print(RESULT_TAG + json.dumps(record), flush=True)


def size_mib(args) -> float:
    """The bytes the engine loads: the weights and tokenizer files, or the whole export."""
    path = args.path
    if args.engine.startswith("keras"):
        files = [path / "model.weights.h5", path / "source.spm", path / "target.spm"]
    elif args.engine == "torch":
        files = [*path.glob("*.safetensors"), *path.glob("*.spm"), path / "vocab.json"]
    else:
        files = [p for p in path.rglob("*") if p.is_file()]
    return round(sum(p.stat().st_size for p in files) / 2**20, 1)


def tensorflow_threads(threads):
    """TensorFlow as the CLI sets it up, with `threads` intra-op and inter-op threads."""
    from keras_transformer import runtime

    runtime.configure()
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(threads)


def keras_engine(args):
    """`Translator.translate`, text in and out; the output lengths are those of the same
    search on the batch's source ids (`decode_n_best`), checked once on the warm-up batch."""
    tensorflow_threads(args.threads)
    from keras_transformer.decoding.translator import load_run, pad_to_bucket

    translator = load_run(args.path, jit_compile=args.engine == "keras-xla")
    search = search_settings(args)
    checked = set()

    def translate(sentences, batch):
        translator.translate(sentences, search, batch_sentences=batch, progress=False)
        if batch not in checked:
            source = pad_to_bucket(translator.encode_sentences(sentences))
            checked.add(batch)
            return translator.decode_n_best(source, search).lengths[:, 0].numpy().tolist()
        return [args.target_length] * len(sentences)

    return translate


def saved_model_engine(args):
    """`serving_default`, text in and out; output lengths checked on the warm-up batch through
    `translate_ids`, the same search on the source ids."""
    tensorflow_threads(args.threads)
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the SentencePiece ops)

    from keras_transformer.decoding.translator import load_run, pad_to_bucket

    signatures = tf.saved_model.load(str(next(args.path.iterdir()))).signatures
    encoder = load_run(args.path.parent / RUN)
    search = search_settings(args)
    checked = set()

    def translate(sentences, batch):
        signatures["serving_default"](text=tf.constant(sentences))
        if batch not in checked:
            checked.add(batch)
            result = signatures["translate_ids"](
                source_ids=tf.constant(pad_to_bucket(encoder.encode_sentences(sentences))),
                beam_size=tf.constant(search.beam_size),
                alpha=tf.constant(search.alpha),
                extra_length=tf.constant(search.extra_length),
            )
            return (result["target_ids"].numpy() != 0).sum(axis=1).tolist()
        return [args.target_length] * len(sentences)

    return translate


def litert_engine(args):
    """`TFLiteTranslator.translate`, text in and out, a sentence a call whatever the batch; the
    output lengths are those of its target ids, checked on the warm-up batch."""
    tensorflow_threads(args.threads)  # the tokenizer's ops
    from keras_transformer.export.layout import TFLITE_MODEL
    from keras_transformer.export.tflite_translator import TFLiteTranslator

    translator = TFLiteTranslator(args.path / "1" / TFLITE_MODEL, threads=args.threads)
    warmed_up = []

    def translate(sentences, batch):
        translator.translate(sentences)
        if not warmed_up:
            warmed_up.append(batch)
            targets, _ = translator.translate_ids(translator.source_ids(sentences))
            return [len(target) for target in targets]
        return [args.target_length] * len(sentences)

    return translate


def torch_engine(args):
    """transformers' `generate()`: beam 4, `min_new_tokens` = `max_new_tokens`, never `<pad>`
    (as OPUS-MT's `bad_words_ids`), no EOS forced at the limit."""
    import torch
    from transformers import MarianMTModel, MarianTokenizer

    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    tokenizer = MarianTokenizer.from_pretrained(args.path)
    model = MarianMTModel.from_pretrained(args.path).eval()
    pad = model.config.pad_token_id

    def translate(sentences, batch):
        inputs = tokenizer(sentences, return_tensors="pt", padding=True)
        with torch.inference_mode():
            output = model.generate(
                **inputs,
                num_beams=BEAM_SIZE,
                max_new_tokens=args.target_length,
                min_new_tokens=args.target_length,
                bad_words_ids=[[pad]],
                forced_eos_token_id=None,  # else EOS at the limit, which min_new_tokens bans
            )
        tokenizer.batch_decode(output, skip_special_tokens=True)
        return [int((row != pad).sum()) for row in output]  # the start token is <pad>

    return translate


def ct2_engine(args):
    """`ctranslate2.Translator.translate_batch` on the source model's pieces (and `</s>`),
    `min_decoding_length` = `max_decoding_length`."""
    import ctranslate2
    import sentencepiece

    checkpoint = args.path.parent / CHECKPOINT  # the converter writes no SentencePiece model
    source, target = (
        sentencepiece.SentencePieceProcessor(model_file=str(checkpoint / name))
        for name in ("source.spm", "target.spm")
    )
    engine = ctranslate2.Translator(
        str(args.path), device="cpu", inter_threads=1, intra_threads=args.threads
    )

    def translate(sentences, batch):
        pieces = [p + [EOS_PIECE] for p in source.encode(sentences, out_type=str)]
        results = engine.translate_batch(
            pieces,
            max_batch_size=batch,
            beam_size=BEAM_SIZE,
            max_decoding_length=args.target_length,
            min_decoding_length=args.target_length,
        )
        outputs = [result.hypotheses[0] for result in results]
        target.decode(outputs)
        return [len(tokens) for tokens in outputs]

    return translate


# --profile: where our search spends a batch.

# The part of the model an op belongs to, by patterns of its lowercased name (the first part
# that matches): the tied output projection is the loop's own matrix product, outside every
# layer's scope (a Tensordot, or a MatMul that grappler fused with the output bias's add).
MODEL_PARTS = (
    ("output projection (58k logits)", ("/while/tensordot", r"/while/[^/]*:\w*matmul$")),
    ("feed-forward", ("feed_forward",)),
    ("attention projections (Q, K, V, output)", ("query_", "key_", "value_", "output_")),
    ("beam search: log-softmax, top-k, reordering", ("logsoftmax", "topk", "gather")),
    ("layer norm", ("norm",)),
)


def profile(args, workdir: Path):
    """Prints where our plain search (`keras`: `Translator` without XLA) spends one batch of
    `--profile` sentences: the wall time of a call, and the thread time of its TensorFlow ops
    (tf.profiler, read as `profile_step.py` reads it), by the part of the model they belong to
    (`MODEL_PARTS`), ms a call; then the largest ops by name. Then where our int8 path
    (`litert-int8-batch16`) spends its calls (`litert_profile`). Writes both as JSON lines to
    `--out` (default `benchmarks/results/pretrained-profile-<UTC stamp>.jsonl`)."""
    from profile_step import op_times

    args.engines = ["keras", LITERT_PROFILED]
    tensorflow_threads(args.threads)  # before `prepare_models`' import starts TensorFlow
    paths, sources_path = prepare_models(args, workdir)
    import tensorflow as tf

    from keras_transformer.decoding.translator import load_run, pad_to_bucket

    translator = load_run(paths["keras"])
    sentences = json.loads(sources_path.read_text(encoding="utf-8"))[: args.profile]
    source = pad_to_bucket(translator.encode_sentences(sentences))
    search = search_settings(args)
    for _ in range(2):  # traces, warms up
        translator.decode_n_best(source, search)
    logdir = Path(tempfile.mkdtemp(prefix="kt-pretrained-profile-"))
    tf.profiler.experimental.start(str(logdir))
    start = time.perf_counter()
    translator.decode_n_best(source, search)
    call_ms = 1000 * (time.perf_counter() - start)
    tf.profiler.experimental.stop()
    # TensorFlow ops (`scope/name:Type`), not the runtime's spans (`ExecutorState::Process`).
    ops = {n: ms for n, ms in op_times(logdir).items() if re.fullmatch(r"[^: ]+:\w+", n)}
    parts = collections.Counter()
    for name, ms in ops.items():
        parts[model_part(name)] += ms
    total = sum(parts.values())
    print(
        f"{len(sentences)} sentences, beam {BEAM_SIZE}, {args.target_length} steps: "
        f"{call_ms:,.0f} ms a call, {total:,.0f} ms of op thread time"
    )
    for part, ms in parts.most_common():
        print(f"  {part:<44} {ms:9,.0f} ms  {100 * ms / total:5.1f}%")
    largest = collections.Counter(ops).most_common(15)
    print("largest ops:")
    for name, ms in largest:
        print(f"  {ms:9,.0f}  {name}")
    records = [
        {
            "engine": "keras",
            "call_ms": round(call_ms),
            "op_thread_ms": round(total),
            "parts_ms": {part: round(ms) for part, ms in parts.most_common()},
            "largest_ops_ms": {name: round(ms) for name, ms in largest},
        },
        litert_profile(args, paths[LITERT_PROFILED], sentences),
    ]
    now = datetime.datetime.now(datetime.UTC)
    out = args.out or REPO / f"benchmarks/results/pretrained-profile-{now:%Y-%m-%dT%H%MZ}.jsonl"
    with out.open("w", encoding="utf-8") as file:
        for record in records:
            record.update(
                sentences=len(sentences),
                beam_size=BEAM_SIZE,
                target_length=args.target_length,
                threads=args.threads,
                **machine(),
                utc=f"{now:%Y-%m-%dT%H:%MZ}",
            )
            file.write(json.dumps(record) + "\n")
    print(f"wrote {out}")


LITERT_PROFILED = "litert-int8-batch16"
# A line of `perf report --stdio -g none`: "  18.98%  [.] symbol".
PERF_LINE = re.compile(r"^\s+([\d.]+)%\s+\[[.k]\]\s+(.+?)\s*$", re.MULTILINE)


def litert_profile(args, export: Path, sentences, calls=3) -> dict:
    """Where LiteRT spends `calls` calls of `TFLiteTranslator` on `sentences` after a warm-up
    call: `perf record` on this process meanwhile, its CPU samples' shares by native function
    (`perf report --sort symbol`), the 15 largest, in percent; needs Linux's `perf`."""
    from keras_transformer.export.layout import TFLITE_MODEL
    from keras_transformer.export.tflite_translator import TFLiteTranslator

    translator = TFLiteTranslator(export / "1" / TFLITE_MODEL, threads=args.threads)
    translator.translate(sentences)  # XNNPACK packs its weights
    with tempfile.TemporaryDirectory() as scratch:
        data = Path(scratch) / "perf.data"
        command = ["perf", "record", "-F", "499", "-o", str(data), "-p", str(os.getpid())]
        perf = subprocess.Popen(command, stderr=subprocess.DEVNULL)
        time.sleep(2)  # perf attaches
        start = time.perf_counter()
        for _ in range(calls):
            translator.translate(sentences)
        call_ms = 1000 * (time.perf_counter() - start) / calls
        perf.send_signal(signal.SIGINT)
        perf.wait()
        report = ["perf", "report", "-i", str(data), "--no-children", "--sort", "symbol"]
        report = subprocess.run(
            [*report, "--stdio", "-g", "none"], capture_output=True, text=True, check=True
        ).stdout
    shares = [(float(share), name[:120]) for share, name in PERF_LINE.findall(report)]
    for share, name in shares[:15]:
        print(f"  {share:5.1f}%  {name}")
    return {
        "engine": LITERT_PROFILED,
        "call_ms": round(call_ms),
        "largest_functions_percent": {name: share for share, name in shares[:15]},
    }


def model_part(op_name) -> str:
    name = op_name.lower()
    return next(
        (part for part, patterns in MODEL_PARTS if any(re.search(p, name) for p in patterns)),
        "other",
    )


ENGINE_LOADERS = {
    "keras": keras_engine,
    "keras-xla": keras_engine,
    "saved-model": saved_model_engine,
    "litert-float32": litert_engine,
    "litert-int8": litert_engine,
    "litert-int8-batch16": litert_engine,
    "torch": torch_engine,
    "ct2-float32": ct2_engine,
    "ct2-int8": ct2_engine,
}


if __name__ == "__main__":
    main()
