"""Combinations of `TrainingRun` settings that could not do what they say are refused in one
line, before anything is trained."""

import dataclasses

import pytest

from keras_transformer.errors import ConfigError
from keras_transformer.training.trainer import TrainingRun, for_jax
from keras_transformer.training.training_run import FINE_TUNING_LEARNING_RATE


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


def test_the_constant_schedule_takes_its_defaults_and_the_paper_none_of_its_settings(tmp_path):
    run = TrainingRun(tmp_path, tmp_path, learning_rate_schedule="constant")
    assert (run.learning_rate, run.learning_rate_warmup) == (FINE_TUNING_LEARNING_RATE, 0)
    with pytest.raises(ConfigError, match="^learning_rate set the constant schedule"):
        TrainingRun(tmp_path, tmp_path, learning_rate=1e-4)
    with pytest.raises(ConfigError, match="^learning_rate -0.1 must be positive"):
        TrainingRun(tmp_path, tmp_path, learning_rate_schedule="constant", learning_rate=-0.1)


def test_subwords_with_init_from_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="^subwords with init_from"):
        TrainingRun(tmp_path, tmp_path, init_from=tmp_path, subwords=tmp_path / "subwords.model")
