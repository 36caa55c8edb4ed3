"""`make test` timed, and where its time goes: wall time, the slowest files and tests.

Table: docs/PERFORMANCE.md#test-suite.

Runs `make test` in the checkout (pytest given `--durations=0`, so that it reports every test's
setup, call and teardown) and writes one JSON line: the wall seconds, the exit status, the CPU,
the oneDNN setting, each test file's seconds (its tests' setup, call and teardown added up: the
time one worker spends on it, since `make test` hands a worker whole files) and the slowest
tests. The suite's processes are the only heavy work the machine should have meanwhile.

    .venv/bin/python benchmarks/suite.py [--target test] [--out FILE]
"""

import argparse
import collections
import datetime
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from records import machine

REPO = Path(__file__).resolve().parents[1]
# pytest's `--durations` lines: `12.34s call     tests/x.py::test_y[param]`.
DURATION = re.compile(r"^(\d+\.\d+)s (setup|call|teardown)\s+(\S+?)::(\S+)$")
SUMMARY = re.compile(r"^=*\s*(\d+ (?:passed|failed).*) in [\d.]+s")


def where_time_goes(output: str, slowest: int = 15) -> dict:
    files, tests = collections.Counter(), collections.Counter()
    for line in output.splitlines():
        if match := DURATION.match(line.strip()):
            seconds, _, path, test = match.groups()
            files[path] += float(seconds)
            tests[f"{path}::{test}"] += float(seconds)
    summary = [m.group(1) for line in output.splitlines() if (m := SUMMARY.match(line.strip()))]
    return {
        "summary": summary[-1] if summary else None,
        "test_seconds": round(sum(files.values()), 1),
        "files_s": {path: round(s, 1) for path, s in files.most_common()},
        "slowest_tests_s": {test: round(s, 1) for test, s in tests.most_common(slowest)},
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="test", help="the make target (default: test)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    now = datetime.datetime.now(datetime.UTC)
    environment = {**os.environ, "PYTEST_ADDOPTS": "--durations=0"}
    start = time.monotonic()
    completed = subprocess.run(
        ["make", args.target], cwd=REPO, env=environment, capture_output=True, text=True
    )
    wall = time.monotonic() - start
    sys.stdout.write(completed.stdout[-3000:] + completed.stderr[-3000:])
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
    ).stdout.strip()
    record = {
        "utc": f"{now:%Y-%m-%dT%H:%MZ}",
        "commit": commit,
        "target": args.target,
        "wall_s": round(wall, 1),
        "returncode": completed.returncode,
        "TF_ENABLE_ONEDNN_OPTS": os.environ.get("TF_ENABLE_ONEDNN_OPTS"),
        **machine(),
        **where_time_goes(completed.stdout),
    }
    out = args.out or REPO / f"benchmarks/results/suite-{now:%Y-%m-%dT%H%MZ}.jsonl"
    with out.open("a", encoding="utf-8") as file:
        file.write(json.dumps(record) + "\n")
    print(f"make {args.target}: {wall / 60:.1f} min, exit {completed.returncode}; wrote {out}")
    sys.exit(completed.returncode)


if __name__ == "__main__":
    main()
