"""Mixed precision and XLA (`jit_compile`) train without NaN, XLA matches the plain path,
bfloat16 on a CPU that would run it slower than float32 is warned of, and XLA's fused code uses
the CPU's full vector width."""

import os
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import pytest

from keras_transformer import TransformerConfig
from keras_transformer.decoding.search import greedy_decode
from keras_transformer.runtime import VECTOR_WIDTH_FLAG
from keras_transformer.training.trainer import (
    TrainingRun,
    bfloat16_cpu_warning,
    compile_model,
    cpu_flags,
    cpu_has_bfloat16_units,
)

pytestmark = pytest.mark.slow  # XLA compilations and mixed precision

CONFIG = TransformerConfig.preset("tiny", num_layers=1, warmup_steps=5)


def toy_batches(pairs=16, length=7):
    rng = np.random.default_rng(4)
    ids = rng.integers(4, CONFIG.vocab_size, size=(pairs, length)).astype("int32")
    ids[:, -2:] = 0  # some padding
    target_in = np.concatenate([np.ones((pairs, 1), "int32"), ids[:, :-1]], axis=1)
    target_in[ids == 0] = 0
    return (ids, target_in), ids


@pytest.fixture
def policy():
    yield keras.mixed_precision.set_global_policy
    keras.mixed_precision.set_global_policy("float32")


@pytest.mark.parametrize("precision", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision_trains_without_nan(policy, precision):
    policy(precision)
    x, y = toy_batches()
    model = compile_model(CONFIG)
    assert model.source_embedding.compute_dtype == precision.removeprefix("mixed_")
    losses = model.fit(x, y, batch_size=4, epochs=3, verbose=0).history["loss"]
    assert np.all(np.isfinite(losses)) and losses[-1] < losses[0]
    assert model((x[0][:1], x[1][:1])).dtype == "float32"  # logits stay float32
    # Cached decoding runs under the policy too: its cache takes the compute dtype.
    decoded = greedy_decode(model, x[0][:2], extra_length=3)
    assert np.all(np.isfinite(decoded.log_probs)) and decoded.ids.shape == (2, 7 + 3)


def test_xla_gives_the_same_losses_as_the_plain_path():
    x, y = toy_batches()
    histories = []
    for jit_compile in (False, True):
        keras.utils.set_random_seed(9)
        model = compile_model(CONFIG.replace(residual_dropout=0.0), jit_compile=jit_compile)
        histories.append(model.fit(x, y, batch_size=4, epochs=2, verbose=0).history["loss"])
    np.testing.assert_allclose(histories[1], histories[0], rtol=1e-4)
    assert np.all(np.isfinite(histories[1]))


@pytest.mark.parametrize(
    "precision, jit_compile, on_gpu, units, expected",
    [
        ("mixed_bfloat16", False, False, False, "without bfloat16 units"),
        ("mixed_bfloat16", True, False, False, "without bfloat16 units"),
        ("mixed_bfloat16", True, False, True, "drop jit_compile"),
        ("mixed_bfloat16", False, False, True, None),  # oneDNN uses the units
        ("mixed_bfloat16", True, True, False, None),
        ("float32", True, False, False, None),
    ],
)
def test_bfloat16_on_a_cpu_that_would_run_it_slowly_is_warned_of(
    tmp_path, precision, jit_compile, on_gpu, units, expected
):
    run = TrainingRun(tmp_path, tmp_path, precision=precision, jit_compile=jit_compile)
    warning = bfloat16_cpu_warning(run, on_gpu, units)
    assert warning is None if expected is None else expected in warning


def test_bfloat16_units_are_read_from_the_cpu_flags(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("flags\t\t: fpu avx2 fma avx512f\n")
    assert not cpu_has_bfloat16_units(cpuinfo)
    cpuinfo.write_text("flags\t\t: fpu avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n")
    assert cpu_has_bfloat16_units(cpuinfo)


def fused_code_vectors(dump_dir, xla_flags=""):
    """Counts of 16- and 8-float vectors in the LLVM IR that XLA dumps for an elementwise
    fusion compiled in a process of its own, as a user's, after the CLI's runtime settings."""
    script = (
        "from keras_transformer import runtime\n"
        "runtime.configure()\n"
        "import tensorflow as tf\n"
        "x = tf.random.normal([64, 256])\n"
        "tf.function(lambda a: tf.exp(a) * 3.0 + a, jit_compile=True)(x).numpy()\n"
    )
    environment = {**os.environ, "XLA_FLAGS": f"--xla_dump_to={dump_dir} {xla_flags}"}
    subprocess.run([sys.executable, "-c", script], env=environment, check=True, capture_output=True)
    ir = "".join(path.read_text() for path in Path(dump_dir).glob("*.ir-with-opt.ll"))
    return ir.count("<16 x float>"), ir.count("<8 x float>")


def test_importing_the_package_makes_xla_fuse_as_wide_as_the_cpu_vectors(tmp_path):
    """With AVX-512 the fusion is vectorized 16 floats wide, where XLA's default (kept here by
    naming it in `XLA_FLAGS`) is 8; without it, the preference changes no vector."""
    package = fused_code_vectors(tmp_path / "package")
    default = fused_code_vectors(tmp_path / "default", f"{VECTOR_WIDTH_FLAG}=256")
    sixteen, eight = package
    assert default[0] < default[1], "XLA's default is no longer 8 floats wide"
    if "avx512f" in (cpu_flags() or set()):
        assert sixteen > eight, "fusion not 512 bits wide"
    else:
        assert package == default
