"""The table of issue 9's time-matched comparison (`benchmarks/m30k_time_matched.sh`).

Table: docs/RESULTS.md#multi30k-ende-test_2016_flickr-1000-sentences (the PyTorch recipe's row).

Both systems are scored here the same way (`evaluation.corpus_scores`: sacreBLEU cased
detokenized, chrF, BLEU on lowercased Moses-tokenized text) from the hypotheses they wrote for
test_2016_flickr: the PyTorch recipe's greedy `test_2016_flickr.hyp.de`, and our `evaluate`
outputs (greedy and beam 4 on the final weights, beam 4 on the average of the last 5).

    .venv/bin/python benchmarks/time_matched_table.py --torch RUNS/m30k-torch \
        --ours RUNS/multi30k-ende [--ceilings RUNS/ceiling.jsonl]
"""

import argparse
import json
from pathlib import Path

from keras_transformer.analysis.evaluation import corpus_scores
from keras_transformer.run_directory import read_metrics
from pipelines.corpus import read_lines

SPLIT = "test_2016_flickr"
OUR_SEARCHES = [  # (weights directory under eval/, file stem, how it is described)
    ("model", f"{SPLIT}.beam1", "final weights, greedy"),
    ("model", f"{SPLIT}.beam4.alpha0.6", "final weights, beam 4"),
    ("averaged-last5", f"{SPLIT}.beam4.alpha0.6", "average of the last 5 checkpoints, beam 4"),
]


def torch_rows(run: Path):
    result = json.loads((run / "result.json").read_text())
    hypotheses = read_lines(run / f"{SPLIT}.hyp.de")
    training = {
        "minutes": result["train_minutes"],
        "updates": result["steps"],
        "epochs": result["epochs"],
    }
    return [("m30k_torch.py", training, "final weights, greedy", hypotheses)]


def our_rows(run: Path):
    records = read_metrics(run / "metrics.jsonl")
    training = {
        "minutes": records[-1]["minutes"],
        "updates": max(r["step"] for r in records),
        "epochs": sum(r["kind"] == "epoch" for r in records),
    }
    rows = []
    for weights, stem, search in OUR_SEARCHES:
        hypotheses = run / "eval" / weights / f"{stem}.hyp"
        if hypotheses.exists():
            rows.append(("keras-transformer", training, search, read_lines(hypotheses)))
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--torch", type=Path, required=True, help="m30k_torch.py's --out")
    parser.add_argument("--ours", type=Path, required=True, help="our run directory")
    parser.add_argument("--data-dir", type=Path, default=Path("../shared/data/multi30k"))
    parser.add_argument("--ceilings", type=Path, help="matmul_ceiling.py records of the run")
    args = parser.parse_args()

    references = read_lines(args.data_dir / f"{SPLIT}.de.gz")
    rows = torch_rows(args.torch) + our_rows(args.ours)
    print(
        "| system | search | training minutes | updates | epochs | sacreBLEU cased | chrF "
        "| BLEU lowercased tokenized |"
    )
    print("|---|---|---|---|---|---|---|---|")
    scored = []
    for system, training, search, hypotheses in rows:
        scores = corpus_scores(hypotheses, references, "de")
        scored.append((system, search, scores))
        print(
            f"| {system} | {search} | {training['minutes']:.1f} | {training['updates']:,} "
            f"| {training['epochs']} | {scores['bleu']:.2f} | {scores['chrf']:.2f} "
            f"| {scores['bleu_tokenized_lowercase']:.2f} |"
        )
    greedy = {system: s["bleu"] for system, search, s in scored if search.endswith("greedy")}
    if len(greedy) == 2:
        ratio = greedy["keras-transformer"] / greedy["m30k_torch.py"]
        print(f"\nGreedy sacreBLEU, ours / PyTorch recipe: {ratio:.2f}x")
    print(f"sacreBLEU signature: {scored[0][2]['bleu_signature']}")
    if args.ceilings and args.ceilings.exists():
        for line in args.ceilings.read_text().splitlines():
            record = json.loads(line)
            print(f"matmul ceiling {record['date_utc']}: {record['xla_jit']['gflops']} GFLOP/s")


if __name__ == "__main__":
    main()
