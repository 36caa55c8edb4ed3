"""benchmarks/gpu.py on this CPU in JAX's CPU mode (`--smoke`), in a process where TensorFlow
cannot be imported, as on the GPU machine: the script keeps working between GPU runs, and its
FLOP count is the model's own weight matrices' (6 FLOPs a weight and token: forward and
backward) plus attention's."""

import json

from without_tensorflow import run_script

SMOKE = """
import json, runpy
import numpy as np
from without_tensorflow import refuse_tensorflow

refuse_tensorflow()
gpu = runpy.run_path("benchmarks/gpu.py")
gpu["main"](["--smoke", "--out", "-"])
config = gpu["TransformerConfig"].preset("tiny")
model = gpu["Transformer"](config)
matrices = sum(
    int(np.prod(w.shape)) for w in model.weights if w.path.endswith(("kernel", "embeddings"))
)
# The tied embedding is a lookup on the way in and a matrix on the way out (the logits).
print(json.dumps({"matrices": matrices, "flops": gpu["training_flops"](config, 3, 5)}))
"""


def test_the_gpu_benchmark_runs_on_cpu_jax_without_tensorflow():
    *rows, counts = run_script(SMOKE).strip().splitlines()
    assert [row.split()[:2] for row in rows] == [["tiny", "float32"], ["tiny", "bfloat16"]]
    for row in rows:
        assert "MFU n/a (unknown chip)" in row and "greedy decode" in row
        assert int(row.split("train ")[1].split()[0].replace(",", "")) > 0
    counts = json.loads(counts)
    from keras_transformer import TransformerConfig

    config = TransformerConfig.preset("tiny")
    batch, length = 3, 5
    attention = (
        3 * config.num_layers * batch * length**2 * config.num_heads * (config.d_k + config.d_v)
    )
    assert counts["flops"] == 6 * (counts["matrices"] * batch * length + attention)
