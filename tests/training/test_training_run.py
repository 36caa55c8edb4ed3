"""Combinations of `TrainingRun` settings that could not do what they say are refused in one
line, before anything is trained."""

import dataclasses

import pytest

from keras_transformer.errors import ConfigError
from keras_transformer.training.trainer import TrainingRun, for_jax


def test_skipping_bad_batches_under_float16_loss_scaling_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="^skip_bad_batches with precision 'mixed_float16'"):
        TrainingRun(tmp_path, tmp_path, skip_bad_batches=1, precision="mixed_float16")
    # Without loss scaling the optimizer's own rule applies.
    assert TrainingRun(tmp_path, tmp_path, skip_bad_batches=1, precision="mixed_bfloat16")


def test_deterministic_on_jax_is_refused(tmp_path):
    run = TrainingRun(tmp_path, tmp_path, deterministic=True)
    with pytest.raises(ConfigError, match="^deterministic=True on JAX"):
        for_jax(run)
    assert for_jax(dataclasses.replace(run, deterministic=False)).jit_compile
