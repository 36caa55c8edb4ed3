"""`make demo` on a fresh clone, as a newcomer runs it: its time, install included, and its BLEU.

Table: docs/RESULTS.md#make-demo.

Clones the checkout's HEAD into a temporary folder, points it at the Multi30k data beside the
checkout (`DATA_DIR`), and runs `make demo` there, timing the whole and each stage (install,
prepare, train, evaluate, the rest). `--load N` runs N busy processes beside it for its whole
length, as other work would load the machine: the demo trains a number of updates, not minutes,
so its BLEU must stay the same (±1), only later. One JSON line a run goes to the record, with
the CPU it ran on (times differ between CPUs by 2× and more) and the oneDNN setting the demo's
commands ran under (`TF_ENABLE_ONEDNN_OPTS`, as the environment gave it; the CLI turns it on
where it is unset).

    .venv/bin/python benchmarks/demo.py [--load 0 2] [--out benchmarks/results/demo-<time>.jsonl]
"""

import argparse
import json
import multiprocessing
import os
import re
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from records import machine

REPO = Path(__file__).resolve().parents[1]
DATA_DIR = REPO.parent / "shared" / "data" / "multi30k"
BLEU = re.compile(r"test_2016_flickr en->de beam 4: sacreBLEU (\d+\.\d+)")
# The first line each stage prints, in the order the demo runs them.
STAGES = {
    "prepare": re.compile(r"keras_transformer prepare"),
    "train": re.compile(r"keras_transformer train"),
    "evaluate": re.compile(r"keras_transformer evaluate"),
    "rest": re.compile(r"keras_transformer translate"),
}


def busy():
    while True:
        pass


def run_demo(load: int) -> dict:
    burners = [multiprocessing.Process(target=busy, daemon=True) for _ in range(load)]
    for burner in burners:
        burner.start()
    try:
        with tempfile.TemporaryDirectory() as scratch:
            clone = Path(scratch) / "keras-transformer"
            subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
            return timed_make_demo(clone) | {"load_processes": load}
    finally:
        for burner in burners:
            burner.kill()


def timed_make_demo(clone: Path) -> dict:
    """Runs `make demo` in `clone`, noting when each stage's command line is echoed."""
    start = time.monotonic()
    marks, output = {}, []
    with subprocess.Popen(
        ["make", "demo", f"DATA_DIR={DATA_DIR}"],
        cwd=clone,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    ) as make:
        for line in make.stdout:
            sys.stdout.write(line)
            output.append(line)
            for stage, pattern in STAGES.items():
                if stage not in marks and pattern.search(line):
                    marks[stage] = time.monotonic() - start
    total = time.monotonic() - start
    if make.returncode:
        raise SystemExit(f"make demo failed with exit code {make.returncode}")
    bleu = BLEU.search("".join(output))
    bounds = [0.0, *marks.values(), total]
    return {
        "total_s": round(total, 1),
        "stages_s": {
            name: round(end - begin, 1)
            for name, begin, end in zip(["install", *marks], bounds[:-1], bounds[1:], strict=True)
        },
        "test_2016_flickr_bleu": float(bleu.group(1)) if bleu else None,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--load", type=int, nargs="+", default=[0], help="busy processes a run")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H%MZ")
    out = args.out or REPO / "benchmarks" / "results" / f"demo-{stamp}.jsonl"
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
    ).stdout.strip()
    for load in args.load:
        record = {"date": stamp, "commit": commit, **run_demo(load), **machine()}
        record["TF_ENABLE_ONEDNN_OPTS"] = os.environ.get("TF_ENABLE_ONEDNN_OPTS")
        print(json.dumps(record))
        with out.open("a") as file:
            file.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    main()
