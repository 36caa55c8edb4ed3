"""TFLite (LiteRT) exports: size and quality of float32, dynamic-range int8 and float16 weights.

Table: docs/PRETRAINED.md#tflite-sizes.

For each run, exports `export --format tflite` three times (`--quantize` none, `dynamic`,
`float16`) with one search fixed in the model, and translates Multi30k test_2016_flickr one
sentence at a time with `TFLiteTranslator` (LiteRT's interpreter, what `translate --model
x.tflite` runs) on `--threads` threads, tokenized outside the model as its tokenizer note says:

- `--model`: a trained Multi30k run, beam 4, α 0.6, +50 (§6.1); sacreBLEU of each export
  against the references, and how many translations equal the float32 export's;
- `--imported`: imported pretrained models (`keras-transformer import`), greedy; how many of
  each export's target ids equal the float32 export's, sentence for sentence. The independent
  reference beside them: the same count for CTranslate2 (what LibreTranslate runs), its int8
  conversion against its float32 one (`export --format ctranslate2 [--quantization int8]`),
  given the same source pieces, greedy, one sentence a call.

Also each file's size and the median latency of a sentence. One JSON line per run and export
in the record.

    .venv/bin/python benchmarks/tflite.py --model runs/demo [--imported RUN ...]
        [--sentences 1000] [--imported-sentences 100]
        [--out benchmarks/results/tflite-<UTC stamp>.jsonl]
"""

import argparse
import datetime
import json
import statistics
import tempfile
import time
from pathlib import Path

import tensorflow as tf
from records import machine, put_checkout_first

from keras_transformer import runtime
from keras_transformer.analysis.evaluation import corpus_scores
from keras_transformer.decoding.translator import load_run
from keras_transformer.export.layout import TFLITE_QUANTIZATIONS
from keras_transformer.export.tflite import TFLITE_SOURCE_LENGTH, export_tflite
from keras_transformer.export.tflite_translator import TFLiteTranslator
from keras_transformer.search_settings import SearchSettings
from pipelines.corpus import read_lines

REPO = Path(__file__).resolve().parent.parent
SPLIT = "test_2016_flickr"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, help="a trained Multi30k run directory")
    parser.add_argument(
        "--imported", type=Path, nargs="+", default=[], help="imported pretrained models' runs"
    )
    parser.add_argument("--data-dir", type=Path, default=REPO.parent / "shared/data/multi30k")
    parser.add_argument("--sentences", type=int, default=1000, help="--model's")
    parser.add_argument("--imported-sentences", type=int, default=100)
    parser.add_argument("--source-length", type=int, default=TFLITE_SOURCE_LENGTH)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if not (args.model or args.imported):
        parser.error("give --model, --imported or both")
    runtime.configure()
    records = []
    if args.model:
        records += compare_exports(args, args.model, SearchSettings(), args.sentences)
    for run_dir in args.imported:
        greedy = SearchSettings(beam_size=1)
        records += compare_exports(args, run_dir, greedy, args.imported_sentences)
        records += compare_ctranslate2(args, run_dir, greedy, args.imported_sentences)
    now = datetime.datetime.now(datetime.UTC)
    out = args.out or REPO / f"benchmarks/results/tflite-{now:%Y-%m-%dT%H%MZ}.jsonl"
    with out.open("w", encoding="utf-8") as file:
        for record in records:
            record.update(machine(), utc=f"{now:%Y-%m-%dT%H:%MZ}")
            file.write(json.dumps(record) + "\n")
    print(f"wrote {out}")


def compare_exports(args, run_dir: Path, search: SearchSettings, count: int) -> list[dict]:
    """One record per export of `run_dir`: size, latency, agreement with float32, and with
    `--model`'s search, sacreBLEU."""
    translator = load_run(run_dir)
    language = json.loads((run_dir / "run.json").read_text())["target_language"]
    sentences = read_lines(args.data_dir / f"{SPLIT}.en.gz")[:count]
    references = read_lines(args.data_dir / f"{SPLIT}.{language}.gz")[:count]
    records, float32_ids = [], None
    with tempfile.TemporaryDirectory() as scratch:
        for quantize in (None, *TFLITE_QUANTIZATIONS):
            weights = quantize or "float32"
            path = export_tflite(
                translator,
                Path(scratch) / f"{weights}.tflite",
                quantize,
                args.source_length,
                search,
            )
            ids, seconds = translate_each(path, sentences, args.threads)
            float32_ids = float32_ids or ids
            record = {
                "run": str(run_dir),
                "engine": "litert",
                "weights": weights,
                "search": search_name(search),
                "file_mib": round(path.stat().st_size / 2**20, 2),
                "sentences": len(sentences),
                "same_ids_as_float32": agreeing(ids, float32_ids),
                "latency_median_ms": round(1000 * statistics.median(seconds), 1),
            }
            if search.beam_size > 1:
                texts = translator.tokenizer.detokenize(tf.ragged.constant(ids, tf.int32))
                texts = [text.decode("utf-8") for text in texts.numpy()]
                scores = corpus_scores(texts, references, language, translator.tokenizer.lowercase)
                record["sacrebleu"] = round(scores["bleu"], 2)
            print(json.dumps(record), flush=True)
            records.append(record)
    return records


def compare_ctranslate2(args, run_dir: Path, search: SearchSettings, count: int) -> list[dict]:
    """CTranslate2's float32 and int8 conversions of `run_dir`, greedy: the int8 one's agreement
    with the float32 one, and the median latency of a sentence."""
    put_checkout_first(REPO)  # `import ctranslate2`: the engine, not the script beside this one
    import ctranslate2

    from keras_transformer.export.ctranslate2_export import export_ctranslate2

    translator = load_run(run_dir)
    sentences = read_lines(args.data_dir / f"{SPLIT}.en.gz")[:count]
    sources = [translator.tokenizer.pieces(ids) for ids in translator.encode_sentences(sentences)]
    records, float32_pieces = [], None
    with tempfile.TemporaryDirectory() as scratch:
        for quantization in (None, "int8"):
            weights = quantization or "float32"
            path = export_ctranslate2(translator, Path(scratch) / weights, quantization)
            engine = ctranslate2.Translator(str(path), device="cpu", intra_threads=args.threads)
            pieces, seconds = [], []
            for source in sources:
                start = time.perf_counter()
                (result,) = engine.translate_batch(
                    [source],
                    beam_size=search.beam_size,
                    max_decoding_length=len(source) + search.extra_length,
                    min_decoding_length=0,
                )
                seconds.append(time.perf_counter() - start)
                pieces.append(result.hypotheses[0])
            float32_pieces = float32_pieces or pieces
            record = {
                "run": str(run_dir),
                "engine": "ctranslate2",
                "weights": weights,
                "search": search_name(search),
                "sentences": len(sentences),
                "same_ids_as_float32": agreeing(pieces, float32_pieces),
                "latency_median_ms": round(1000 * statistics.median(seconds), 1),
            }
            print(json.dumps(record), flush=True)
            records.append(record)
    return records


def search_name(search: SearchSettings) -> str:
    return "greedy" if search.beam_size == 1 else f"beam{search.beam_size}"


def agreeing(outputs, reference) -> int:
    """How many of `outputs` equal `reference`'s, sentence for sentence."""
    return sum(output == expected for output, expected in zip(outputs, reference, strict=True))


def translate_each(path, sentences, threads):
    """Each sentence's target ids (a list, to EOS) and seconds, one call a sentence, as
    `TFLiteTranslator` (what `translate --model x.tflite` runs) tokenizes and decodes."""
    translator = TFLiteTranslator(path, threads)
    outputs, seconds = [], []
    for row in translator.source_ids(sentences):
        start = time.perf_counter()
        (target,), _ = translator.translate_ids(row[None])
        seconds.append(time.perf_counter() - start)
        outputs.append(target)
    return outputs, seconds


if __name__ == "__main__":
    main()
