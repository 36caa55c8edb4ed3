"""The classical baseline of the parsing experiment (§6.3), scored exactly like the Transformer.

Table: docs/RESULTS.md#constituency-parsing-63 (the PCFG row).

Induces a PCFG from the training split of the Penn Treebank sample
(`keras_transformer.parsing.pcfg`), parses a split's sentences with it, linearizes the trees and
scores them with the function that `keras-transformer evaluate` uses for a ptb run
(`keras_transformer.parsing.constituency.parse_scores`: EVALB's COLLINS.prm conventions).
Prints one JSON object: precision, recall, F1, complete match, how many sentences the grammar
parsed (the rest get a flat tree), and seconds.

    .venv/bin/python benchmarks/pcfg_baseline.py [--split test] [--max-words N]
        [--horizontal 2] [--vertical 1] [--transformer RUN/eval/WEIGHTS/test.beam21.alpha1.hyp]

`--max-words` keeps the sentences of at most N words; `--transformer` scores a Transformer's
hypotheses of the same split on the same sentences, so the two F1 are comparable.
"""

import argparse
import json
import sys
import time
from pathlib import Path

from keras_transformer.parsing.constituency import parse_scores
from keras_transformer.parsing.pcfg import PCFGParser
from pipelines.corpus import read_lines
from pipelines.ptb import linearize, split_treebank


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, default=Path("../shared/data/ptb_sample"))
    parser.add_argument("--split", default="test", choices=["validation", "test"])
    parser.add_argument("--max-words", type=int, help="only sentences of at most this many words")
    parser.add_argument("--horizontal", type=int, default=2, help="horizontal Markov order")
    parser.add_argument("--vertical", type=int, default=1, help="parent annotation depth")
    parser.add_argument("--transformer", type=Path, help="a ptb run's .hyp file of --split")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    splits = split_treebank(args.data_dir)
    start = time.perf_counter()
    parser = PCFGParser.train(splits["train"], args.horizontal, args.vertical)
    train_seconds = time.perf_counter() - start
    trees = splits[args.split]
    kept = [
        i for i, t in enumerate(trees) if not args.max_words or len(t.leaves()) <= args.max_words
    ]
    sources = [" ".join(trees[i].leaves()) for i in kept]
    references = [linearize(trees[i]) for i in kept]
    start, hypotheses, levels = time.perf_counter(), [], []
    for sentence in sources:
        tree, level = parser.parse_or_flat(sentence.split())
        hypotheses.append(linearize(tree))
        levels.append(level)
    result = {
        "split": args.split,
        "max_words": args.max_words,
        "pcfg": parse_scores(sources, hypotheses, references),
        # Sentences parsed by the grammar, by each back-off grammar, and left flat.
        "parsed_by_level": [levels.count(k) for k in range(args.vertical + 1)],
        "flat_fallbacks": levels.count(-1),
        "coverage": 100 * (len(levels) - levels.count(-1)) / max(len(levels), 1),
        "grammar": {
            "horizontal": args.horizontal,
            "vertical": args.vertical,
            "symbols": len(parser.symbols),
            "binary_rules": len(parser.left),
            "words": len(parser.vocabulary),
        },
        "train_seconds": round(train_seconds, 1),
        "parse_seconds": round(time.perf_counter() - start, 1),
    }
    if args.transformer:
        transformer = read_lines(args.transformer)
        if len(transformer) != len(trees):
            raise SystemExit(f"{args.transformer}: {len(transformer)} lines for {len(trees)}")
        result["transformer"] = parse_scores(sources, [transformer[i] for i in kept], references)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
