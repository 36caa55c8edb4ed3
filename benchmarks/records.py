"""What an engine comparison's records hold and how they are gathered: the CPU, cores and
Python; a process's peak resident memory; one child process per engine, whose record it prints;
the records as a Markdown table. Standard library only, so that a child in another virtual
environment (`pretrained.py`'s reference engines) imports it too.

Table: none of its own; `ctranslate2.py` and `pretrained.py` record with it
(docs/PRETRAINED_PERFORMANCE.md#speed-against-transformers-and-ctranslate2).
"""

import json
import os
import platform
import subprocess
import sys
from pathlib import Path


def put_checkout_first(repo: Path):
    """The import path with the checkout `repo` first and this directory last: the checkout's
    packages, not an installed copy's, and the engine `ctranslate2`, not the script of that name
    here (a script's own directory comes first, where it found this module)."""
    here = Path(__file__).resolve().parent
    others = [p for p in sys.path if Path(p or ".").resolve() not in (here, repo)]
    sys.path[:] = [str(repo), *others, str(here)]


# The CPU features that decide TensorFlow's kernels (oneDNN turns itself on only with the last
# three) and XLA's vector width.
CPU_FEATURES = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "amx_tile")


def machine() -> dict:
    """The CPU (its name, family and model, the features of `CPU_FEATURES` it has), the cores
    this process may use and Python's version."""
    fields = {}
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())  # the first processor's
    flags = fields.get("flags", "").split()
    return {
        "cpu": fields.get("model name", "unknown"),
        "cpu_family_model": f"{fields.get('cpu family')}/{fields.get('model')}",
        "cpu_features": [feature for feature in CPU_FEATURES if feature in flags],
        "cores": len(os.sched_getaffinity(0)),
        "python": platform.python_version(),
    }


def status_mib(field, pid="self") -> int:
    """A memory figure (VmRSS, VmHWM, ...) of a process's /proc status, in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return round(int(line.split()[1]) / 1024)
    raise RuntimeError(f"no {field} in /proc/{pid}/status")


def peak_rss_mib() -> int:
    """This process's peak resident memory since its `exec` (VmHWM). Not `ru_maxrss`, which a
    child inherits from its parent's at `fork`."""
    return status_mib("VmHWM")


def child_record(engine, command, tag, cwd, environment=None) -> dict:
    """Runs `command`, the child process measuring `engine`, and returns the JSON record it
    printed on a line starting with `tag`; ends the benchmark with its output if it failed."""
    print(f"measuring {engine} ...", flush=True)
    completed = subprocess.run(command, cwd=cwd, capture_output=True, text=True, env=environment)
    lines = [line for line in completed.stdout.splitlines() if line.startswith(tag)]
    if completed.returncode or not lines:
        raise SystemExit(
            f"{engine} failed:\n{completed.stdout[-3000:]}\n{completed.stderr[-3000:]}"
        )
    record = json.loads(lines[-1][len(tag) :])
    print(json.dumps(record), flush=True)
    return record


# The speed columns of an engine comparison (`ctranslate2.py`, `pretrained.py`): header → cell.
SPEED_COLUMNS = {
    "engine": lambda r: r["engine"],
    "tokens/s b1": lambda r: f"{r['tokens_per_s_b1']:,.0f}",
    "b16": lambda r: f"{r['tokens_per_s_b16']:,.0f}",
    "b64": lambda r: f"{r['tokens_per_s_b64']:,.0f}",
    "p50 1 sentence": lambda r: f"{r['p50_ms_b1']:,.0f} ms",
}


def markdown_table(records, columns) -> str:
    """`records` (dicts) as a Markdown table, a row each; `columns` maps each header to the
    function giving a record's cell."""
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(r) for cell in columns.values()) + " |" for r in records]
    return "\n".join(lines)
