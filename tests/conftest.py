"""Shared test fixtures: the real data beside the checkout, and quiet, seeded TensorFlow."""

import os
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import pytest  # noqa: E402

from keras_transformer.distribution import configure_logical_cpus  # noqa: E402
from repo_paths import MULTI30K_DIR  # noqa: E402

# 8 logical CPU devices, as the paper's 8 GPUs, for the MirroredStrategy tests. This must happen
# before TensorFlow initialises its devices, hence at import of the conftest.
configure_logical_cpus(8)


@pytest.fixture(scope="session")
def multi30k_dir() -> Path:
    """`../shared/data/multi30k` beside the checkout, or $KT_DATA_DIR."""
    if not MULTI30K_DIR.is_dir():
        pytest.fail(f"Multi30k data not found at {MULTI30K_DIR}; set KT_DATA_DIR")
    return MULTI30K_DIR


@pytest.fixture(autouse=True)
def _seed():
    keras.utils.set_random_seed(1234)
