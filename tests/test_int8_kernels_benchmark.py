"""benchmarks/int8_kernels.py on one tiny shape: every path computes the float32 product (int8's
rounding aside), and the record starts with the machine and the settings that decide the
kernels."""

import json
import subprocess
import sys

import numpy as np

from repo_paths import REPO_ROOT

INT8_PATHS = {
    "int8 matmul",
    "int8 matmul XLA",
    "Keras Dense int8",
    "weight-only dequantize",
    "weight-only dequantize XLA",
    "weight-only scale after",
    "LiteRT int8",
}


def test_every_path_computes_the_product_and_the_record_names_the_machine(tmp_path):
    out = tmp_path / "int8-kernels.jsonl"
    command = [sys.executable, "benchmarks/int8_kernels.py", "--repeats", "1", "--seconds", "0"]
    command += ["--shapes", "3x64x40", "--out", str(out)]
    completed = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
    assert completed.returncode == 0, completed.stderr[-3000:]
    first, *records = (json.loads(line) for line in out.read_text().splitlines())
    assert first["cpu"] and first["threads"] == 2
    assert {"tensorflow", "keras", "ai_edge_litert", "TF_ENABLE_ONEDNN_OPTS"} <= set(first)
    paths = {record["path"]: record for record in records}
    assert set(paths) == INT8_PATHS | {"float32", "float32 XLA", "LiteRT float32"}
    for name, record in paths.items():
        assert record["shape"] == "3x64x40" and record["ms_median"] > 0
        # int8's rounding leaves about 1% of the output's scale on these random matrices.
        assert record["max_abs_error_over_scale"] < (0.03 if name in INT8_PATHS else 1e-5)
    # Keras's int8 Dense computes what the script's own int8 path does.
    int8_error = paths["int8 matmul"]["max_abs_error_over_scale"]
    assert np.isclose(paths["Keras Dense int8"]["max_abs_error_over_scale"], int8_error)
    assert "| 3×64×40 | LiteRT int8 |" in completed.stdout
