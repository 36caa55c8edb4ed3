"""How much does a trained model read its source? Teacher-forced loss, true vs. shuffled sources.

A decoder can lower its loss by modelling the target language alone; only cross-attention
(§3.2.3, "encoder-decoder attention") ties an output to its input. This diagnostic scores the
first `--sentences` pairs of a split with teacher forcing three times: with each pair's own
source, with the sources shuffled among the pairs (right length distribution, wrong content), and
with empty sources (EOS only). It prints one JSON object: mean cross entropy (nats) and accuracy
per non-padding target token for each, and the gaps. A model that reads its source shows a large
`shuffled - true` gap; one near zero writes about the same output whatever the input
(docs/RESULTS.md has the gaps of the Multi30k and parsing runs).

    .venv/bin/python benchmarks/source_reliance.py RUN [--weights W] [--split validation]
        [--sentences 200]
"""

import argparse
import json
import sys
from pathlib import Path

import numpy as np
from keras import ops

from keras_transformer.decoding.translator import load_run, pad_to_bucket
from keras_transformer.objectives.losses import token_cross_entropy
from pipelines.corpus import read_parallel_corpus
from pipelines.datasets import corpus_files
from pipelines.tokenizer import BOS_ID, EOS_ID, PAD_ID

BATCH = 32


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="a training run directory")
    parser.add_argument("--weights", type=Path, help="default: the run's best weights")
    parser.add_argument("--split", default="validation")
    parser.add_argument("--sentences", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0, help="of the shuffle")
    return parser.parse_args(argv)


def score(model, sources, targets) -> dict:
    """Mean per-token cross entropy and accuracy of `targets` given `sources` (lists of ids)."""
    total_loss = total_correct = total_tokens = 0.0
    for start in range(0, len(targets), BATCH):
        source = pad_to_bucket(sources[start : start + BATCH])
        target = pad_to_bucket([[BOS_ID, *t] for t in targets[start : start + BATCH]])
        target_in, target_out = target[:, :-1], target[:, 1:]
        logits = model([source, target_in], training=False)
        real = ops.not_equal(target_out, PAD_ID)
        correct = ops.logical_and(real, ops.equal(ops.argmax(logits, -1), target_out))
        total_loss += float(ops.sum(token_cross_entropy(target_out, logits)))
        total_correct += float(ops.sum(ops.cast(correct, "float32")))
        total_tokens += float(ops.sum(ops.cast(real, "float32")))
    return {"loss": total_loss / total_tokens, "accuracy": total_correct / total_tokens}


def main(argv=None):
    args = parse_args(argv)
    run = json.loads((args.run / "run.json").read_text())
    files = corpus_files(
        run["dataset"], run["data_dir"], run["source_language"], run["target_language"]
    )
    if args.split not in files:
        sys.exit(f"unknown split {args.split!r}; splits: {sorted(files)}")
    corpus = read_parallel_corpus(*files[args.split])
    translator = load_run(args.run, args.weights)
    sources = translator.encode_sentences(corpus.source[: args.sentences])
    targets = translator.encode_sentences(corpus.target[: len(sources)])  # ids + EOS
    shuffled = [sources[i] for i in np.random.default_rng(args.seed).permutation(len(sources))]
    result = {
        "run": str(args.run),
        "weights": str(translator.weights_path),
        "split": args.split,
        "sentences": len(sources),
        "true": score(translator.model, sources, targets),
        "shuffled": score(translator.model, shuffled, targets),
        "empty": score(translator.model, [[EOS_ID]] * len(sources), targets),
    }
    for other in ("shuffled", "empty"):
        result[f"{other}_minus_true_loss"] = result[other]["loss"] - result["true"]["loss"]
    print(json.dumps(result))


if __name__ == "__main__":
    main()
