"""TensorFlow's oneDNN kernels on against off: training and beam decoding, alternated in one run.

Table: docs/DEFAULTS.md#onednn.

TensorFlow reads `TF_ENABLE_ONEDNN_OPTS` once, when it starts, and on Linux turns its oneDNN
kernels on by default only on CPUs with AVX-512 VNNI or BF16, AVX-VNNI or AMX; elsewhere (an AVX2
CPU such as AMD's Zen 2) they stay off unless asked for. Each round runs every workload twice,
in a child process with the variable at 0 and at 1, the order swapped from round to round, so
that the machine's drift falls on both settings alike. The workloads are the repository's own
benchmarks, as a user runs them:

- `train-xla`, `train-graph`: `throughput.py --size small`, the peers' training step, compiled
  by XLA (as `train --jit-compile` and the demo train) and as a plain graph (`--no-jit`); the
  same script then decodes the peers' batch greedily and with beam 4.
- `decode`: `decoding.py`, cached beam 4 and greedy at batch 1 and 64, as `Translator` decodes
  (plain graph, a slice a core).
- `pretrained`: `pretrained.py`'s engine `keras`, OPUS-MT en-de's shape (the 58,101-piece output
  projection), beam 4 at batch 1, 16 and 64. It reads the models that
  `pretrained.py --workdir DIR` built (`--pretrained-workdir DIR`; that needs the reference
  environment once) and is left out without them.

Prints a table of on/off ratios (median and range over the rounds) and writes one JSON line per
workload and setting, each figure with its value in every round, and the machine.

    .venv/bin/python benchmarks/onednn.py [--rounds 3] [--workloads train-xla decode ...]
        [--pretrained-workdir /tmp/pretrained] [--out benchmarks/results/onednn-<UTC>.jsonl]
"""

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from records import machine

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SETTINGS = ("0", "1")
PRETRAINED_TAG = "PRETRAINED_RESULT "


def json_lines(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def throughput_figures(stdout: str) -> dict:
    (record,) = json_lines(stdout)
    return {
        "train tokens/s": record["train"]["tokens_per_s"],
        "greedy b32 tokens/s": record["decode"]["generated_tokens_per_s"],
        "beam4 b32 tokens/s": record["decode_beam4"]["generated_tokens_per_s"],
    }


def decoding_figures(stdout: str) -> dict:
    return {
        f"{r['search']} b{r['batch']} tokens/s": r["generated_tokens_per_s"]
        for r in json_lines(stdout)
    }


def pretrained_figures(stdout: str) -> dict:
    (line,) = [line for line in stdout.splitlines() if line.startswith(PRETRAINED_TAG)]
    record = json.loads(line[len(PRETRAINED_TAG) :])
    return {f"beam4 b{b} tokens/s": record[f"tokens_per_s_b{b}"] for b in (1, 16, 64)}


def workloads(pretrained_workdir: Path | None) -> dict:
    """name → (command, the function reading its figures from its stdout)."""
    python = sys.executable
    chosen = {
        "train-xla": ([python, HERE / "throughput.py", "--size", "small"], throughput_figures),
        "train-graph": (
            [python, HERE / "throughput.py", "--size", "small", "--no-jit"],
            throughput_figures,
        ),
        "decode": (
            [python, HERE / "decoding.py", "--beams", "1", "4", "--no-uncached"],
            decoding_figures,
        ),
    }
    if pretrained_workdir:
        chosen["pretrained"] = (
            [
                *(python, HERE / "pretrained.py", "--engine", "keras"),
                *("--path", pretrained_workdir / "imported"),
                *("--sources", pretrained_workdir / "sources.json"),
            ],
            pretrained_figures,
        )
    return chosen


def run_once(command, setting: str) -> str:
    environment = {**os.environ, "TF_ENABLE_ONEDNN_OPTS": setting}
    completed = subprocess.run(
        [str(part) for part in command], cwd=REPO, env=environment, capture_output=True, text=True
    )
    if completed.returncode:
        raise SystemExit(f"{command} failed:\n{completed.stderr[-3000:]}")
    return completed.stdout


def measure(chosen: dict, rounds: int, write) -> dict:
    """(workload, setting) → figure → its value in each round, the settings' order swapped
    from round to round; `write(figures)` after each round, so that a stopped run keeps its
    rounds."""
    figures = {(name, setting): {} for name in chosen for setting in SETTINGS}
    for round_number in range(rounds):
        order = SETTINGS if round_number % 2 == 0 else SETTINGS[::-1]
        for name, (command, read) in chosen.items():
            for setting in order:
                print(f"round {round_number + 1}/{rounds}: {name}, oneDNN {setting}", flush=True)
                for figure, value in read(run_once(command, setting)).items():
                    figures[name, setting].setdefault(figure, []).append(value)
        write(figures, round_number + 1)
    return figures


def ratio_table(figures: dict) -> str:
    """Each figure's oneDNN on over off, round by round: median and range."""
    lines = ["| workload | figure | off (median) | on (median) | on / off, median | range |"]
    lines.append("|---|---|---|---|---|---|")
    for (name, setting), values in figures.items():
        if setting != "0":
            continue
        for figure, off in values.items():
            on = figures[name, "1"][figure]
            ratios = [b / a for a, b in zip(off, on, strict=True)]
            lines.append(
                f"| {name} | {figure} | {statistics.median(off):,.0f} | "
                f"{statistics.median(on):,.0f} | {statistics.median(ratios):.2f}× | "
                f"{min(ratios):.2f}–{max(ratios):.2f}× |"
            )
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workloads", nargs="+", help="a subset (default: all)")
    parser.add_argument("--pretrained-workdir", type=Path, help="pretrained.py's --workdir")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    chosen = workloads(args.pretrained_workdir)
    chosen = {name: chosen[name] for name in args.workloads or chosen}
    now = datetime.datetime.now(datetime.UTC)
    out = args.out or REPO / f"benchmarks/results/onednn-{now:%Y-%m-%dT%H%MZ}.jsonl"

    def write(figures, rounds_done):
        with out.open("w", encoding="utf-8") as file:
            for (name, setting), values in figures.items():
                record = {"workload": name, "TF_ENABLE_ONEDNN_OPTS": setting, "figures": values}
                record.update(rounds=rounds_done, utc=f"{now:%Y-%m-%dT%H:%MZ}", **machine())
                file.write(json.dumps(record) + "\n")

    figures = measure(chosen, args.rounds, write)
    print(ratio_table(figures))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
