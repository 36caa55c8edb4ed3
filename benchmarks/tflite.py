"""TFLite (LiteRT) exports of a trained run: float vs. dynamic-range quantized.

Exports both (the same decoding: beam 4, α 0.6, +50, or `--beam 1` for greedy), translates the
first `--sentences` lines of Multi30k test_2016_flickr one sentence at a time with the
`ai_edge_litert` interpreter (tokenization outside the model, as on a device), and prints one JSON
line per model with its file size, sacreBLEU, and per-sentence latency (median and p90).

    .venv/bin/python benchmarks/tflite.py --model runs/m30k-ende-small [--sentences 200]
"""

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from ai_edge_litert.interpreter import Interpreter

from keras_transformer.analysis.evaluation import corpus_scores
from keras_transformer.decoding.translator import load_run
from keras_transformer.search_settings import SearchSettings
from keras_transformer.serving.tflite import TFLITE_SOURCE_LENGTH, export_tflite
from pipelines.corpus import read_lines
from pipelines.tokenizer import EOS_ID


def translate_each(path, translator, sentences, source_length):
    """Translations and per-sentence seconds of a TFLite model, one sentence per call."""
    runner = Interpreter(model_path=str(path), num_threads=2).get_signature_runner("translate")
    sources = translator.encode_sentences(sentences)
    translations, seconds = [], []
    for ids in sources:
        row = ids if len(ids) <= source_length else ids[: source_length - 1] + [EOS_ID]
        padded = np.zeros((1, source_length), np.int32)
        padded[0, : len(row)] = row
        start = time.perf_counter()
        target = runner(source_ids=padded)["target_ids"]
        seconds.append(time.perf_counter() - start)
        text = translator.tokenizer.detokenize(target).numpy()[0]
        translations.append(text.decode("utf-8"))
    return translations, seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True, help="training run directory")
    parser.add_argument("--data-dir", type=Path, default=Path("../shared/data/multi30k"))
    parser.add_argument("--target-language", default="de")
    parser.add_argument("--sentences", type=int, default=200)
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--source-length", type=int, default=TFLITE_SOURCE_LENGTH)
    args = parser.parse_args()

    translator = load_run(args.model)
    sentences = read_lines(args.data_dir / "test_2016_flickr.en.gz")[: args.sentences]
    references = read_lines(args.data_dir / f"test_2016_flickr.{args.target_language}.gz")
    references = references[: args.sentences]
    with tempfile.TemporaryDirectory() as scratch:
        for quantize in (None, "dynamic"):
            path = export_tflite(
                translator,
                Path(scratch) / f"{quantize or 'float'}.tflite",
                quantize=quantize,
                source_length=args.source_length,
                search=SearchSettings(beam_size=args.beam),
            )
            translations, seconds = translate_each(path, translator, sentences, args.source_length)
            scores = corpus_scores(
                translations, references, args.target_language, translator.tokenizer.lowercase
            )
            print(
                json.dumps(
                    {
                        "benchmark": "tflite",
                        "model": "float32" if quantize is None else "dynamic-range int8",
                        "search": "greedy" if args.beam == 1 else f"beam{args.beam}",
                        "file_mib": round(path.stat().st_size / 2**20, 2),
                        "sentences": len(sentences),
                        "bleu": round(scores["bleu"], 2),
                        "bleu_tokenized_lowercase": round(scores["bleu_tokenized_lowercase"], 2),
                        "latency_median_s": round(statistics.median(seconds), 4),
                        "latency_p90_s": round(sorted(seconds)[int(0.9 * len(seconds))], 4),
                    }
                ),
                flush=True,
            )


if __name__ == "__main__":
    main()
