"""`train --backend jax` on a slice of real Multi30k: JAX trains through the same tf.data
pipeline, its batches split over two CPU devices by `keras.distribution.DataParallel`, into the
same run files; `export`, on TensorFlow whatever `KERAS_BACKEND` says, turns the run into a
SavedModel whose translations are TensorFlow's search's on the same weights."""

import json
import math
import os
import subprocess
import sys

import pytest
import tensorflow as tf

from keras_transformer.decoding.translator import load_run
from keras_transformer.search_settings import SearchSettings
from pipelines.corpus import read_lines
from repo_paths import REPO_ROOT

pytestmark = pytest.mark.slow  # trains and exports in subprocesses

STEPS = 6


def keras_transformer(*arguments, backend):
    env = dict(
        os.environ, PYTHONPATH=str(REPO_ROOT), TF_CPP_MIN_LOG_LEVEL="2", KERAS_BACKEND=backend
    )
    result = subprocess.run(
        [sys.executable, "-m", "keras_transformer", *map(str, arguments)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result


@pytest.fixture(scope="module")
def jax_run(multi30k_slice, tmp_path_factory):
    output = tmp_path_factory.mktemp("jax") / "run"
    keras_transformer(
        "train",
        *("--preset", "tiny", "--set", "vocab_size=600", "--batch-tokens", "512"),
        *("--data-dir", multi30k_slice, "--output", output, "--backend", "jax"),
        *("--devices", "2", "--max-steps", STEPS, "--checkpoint-every", "3", "--log-every", "1"),
        backend="tensorflow",  # the flag chooses JAX
    )
    return output


def test_jax_trains_a_run_into_the_same_files(jax_run):
    records = [json.loads(line) for line in (jax_run / "metrics.jsonl").read_text().splitlines()]
    losses = [(r["step"], r["loss"]) for r in records if r["kind"] == "train"]
    assert [step for step, _ in losses] == list(range(1, STEPS + 1))
    assert all(math.isfinite(loss) for _, loss in losses)
    assert sorted(p.name for p in (jax_run / "checkpoints").glob("*.h5")) == [
        "ckpt-00000003.weights.h5",
        "ckpt-00000006.weights.h5",
    ]
    assert (jax_run / "backup").is_dir() and (jax_run / "model.weights.h5").exists()
    assert json.loads((jax_run / "run.json").read_text())["jit_compile"] is True


@pytest.mark.long(
    covered_by=[
        "tests/model/test_backends.py::test_weights_trained_on_jax_give_the_same_logits_on_tensorflow",
        "tests/training/test_jax_training.py::test_jax_trains_a_run_into_the_same_files",
    ]
)
def test_a_jax_run_exports_a_saved_model_that_translates_as_tensorflow_does(
    jax_run, tmp_path, multi30k_slice
):
    base = tmp_path / "saved_models" / "jax-run"
    keras_transformer("export", "--model", jax_run, "--output", base, backend="jax")
    sentences = read_lines(multi30k_slice / "test_2016_flickr.en.gz")[:8]
    serve = tf.saved_model.load(str(base / "1")).signatures["serving_default"]
    served = [t.decode() for t in serve(text=tf.constant(sentences))["translations"].numpy()]
    assert served == load_run(jax_run).translate(sentences, SearchSettings(beam_size=4, alpha=0.6))
