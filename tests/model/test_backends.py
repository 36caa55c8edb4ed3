"""The same model on TensorFlow and on JAX: same weights, same logits; weights saved on either
backend load on the other; a fit on JAX lowers the loss; cached greedy decoding on JAX is the
full pass's. Each backend runs in a process of its own (backend_worker.py), the JAX one with
TensorFlow unimportable, so that the model core, the loss, the metrics and the schedule are
shown to run without it.
"""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from repo_paths import REPO_ROOT
from without_tensorflow import python_path

WORKER = Path(__file__).with_name("backend_worker.py")
# float32 logits of two backends' kernels (XLA on JAX, TensorFlow's own ops) differ by rounding.
LOGITS_TOLERANCE = 1e-4


def run_worker(task, backend, directory):
    env = dict(os.environ, KERAS_BACKEND=backend, PYTHONPATH=python_path())
    result = subprocess.run(
        [sys.executable, str(WORKER), task, str(directory)],
        env=env,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    """Each task's arrays: TensorFlow starts, JAX loads and trains, TensorFlow reloads."""
    directory = tmp_path_factory.mktemp("backends")
    for task, backend in (("initial", "tensorflow"), ("train", "jax"), ("reload", "tensorflow")):
        run_worker(task, backend, directory)
    return {path.stem: dict(np.load(path)) for path in directory.glob("*.npz")}


@pytest.mark.slow  # three processes
def test_weights_saved_on_tensorflow_give_the_same_logits_and_ids_on_jax(outputs):
    jax, tensorflow = outputs["initial.jax"], outputs["initial.tensorflow"]
    np.testing.assert_allclose(jax["logits"], tensorflow["logits"], atol=LOGITS_TOLERANCE)
    np.testing.assert_array_equal(jax["greedy_ids"], tensorflow["greedy_ids"])


@pytest.mark.slow
def test_weights_trained_on_jax_give_the_same_logits_on_tensorflow(outputs):
    np.testing.assert_allclose(
        outputs["trained.jax"]["logits"],
        outputs["trained.tensorflow"]["logits"],
        atol=LOGITS_TOLERANCE,
    )


@pytest.mark.slow
def test_a_short_fit_on_jax_lowers_the_loss(outputs):
    trained = outputs["trained.jax"]
    assert trained["loss_after"] < 0.7 * trained["loss_before"]


@pytest.mark.slow
def test_cached_greedy_decoding_on_jax_is_the_full_pass(outputs):
    initial = outputs["initial.jax"]
    # Ids that vary along each sentence: each step's cache entries are read by later steps.
    assert all(len(set(row)) > 2 for row in initial["greedy_ids"].tolist())
    np.testing.assert_array_equal(initial["greedy_ids"], initial["full_pass_ids"])
