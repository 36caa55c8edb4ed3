import keras
import numpy as np
import pytest

from keras_transformer import TransformerConfig
from keras_transformer.objectives.schedule import ConstantSchedule, TransformerSchedule
from keras_transformer.training.optimizer import create_optimizer, run_schedule
from keras_transformer.training.training_run import FINE_TUNING_LEARNING_RATE, TrainingRun


def eq3(step_num, d_model=512, warmup_steps=4000):
    return d_model**-0.5 * min(step_num**-0.5, step_num * warmup_steps**-1.5)


@pytest.mark.parametrize("step_num", [1, 2, 1000, 4000, 4001, 100_000])
def test_schedule_is_eq3_with_step_num_from_one(step_num):
    schedule = TransformerSchedule(d_model=512, warmup_steps=4000)
    # Keras passes the 0-based iteration count; Eq. 3's step_num is that + 1.
    assert float(schedule(step_num - 1)) == pytest.approx(eq3(step_num), rel=1e-6)


def test_schedule_peaks_at_warmup():
    schedule = TransformerSchedule(d_model=512, warmup_steps=4000)
    values = [float(schedule(s)) for s in (3000, 3999, 5000)]
    assert values[1] > values[0] and values[1] > values[2]


def test_schedule_serializes():
    schedule = TransformerSchedule(d_model=256, warmup_steps=100, scale=2.0)
    restored = keras.optimizers.schedules.deserialize(
        keras.optimizers.schedules.serialize(schedule)
    )
    assert float(restored(10)) == pytest.approx(float(schedule(10)))
    assert float(schedule(10)) == pytest.approx(2 * eq3(11, 256, 100), rel=1e-6)


def test_optimizer_is_adam_with_paper_betas():
    optimizer = create_optimizer(TransformerConfig.preset("base"))
    assert isinstance(optimizer, keras.optimizers.Adam)
    assert (optimizer.beta_1, optimizer.beta_2, optimizer.epsilon) == (0.9, 0.98, 1e-9)
    np.testing.assert_allclose(float(optimizer.learning_rate), eq3(1), rtol=1e-6)


def constant_after_warmup(step_num, learning_rate, warmup_steps):
    return learning_rate * (min(1.0, step_num / warmup_steps) if warmup_steps else 1.0)


@pytest.mark.parametrize("warmup_steps", [0, 1, 100])
@pytest.mark.parametrize("step_num", [1, 2, 50, 100, 101, 100_000])
def test_constant_schedule_is_its_formula_with_step_num_from_one(step_num, warmup_steps):
    schedule = ConstantSchedule(learning_rate=3e-5, warmup_steps=warmup_steps)
    expected = constant_after_warmup(step_num, 3e-5, warmup_steps)
    assert float(schedule(step_num - 1)) == pytest.approx(expected, rel=1e-6)


def test_constant_schedule_counts_updates_of_accumulated_micro_batches():
    schedule = ConstantSchedule(learning_rate=1e-4, warmup_steps=10, accumulation_steps=4)
    # Micro-batches 0-3 are update 1, 36-39 update 10: the end of the warmup.
    rates = [float(schedule(micro_batch)) for micro_batch in (0, 3, 4, 39, 40)]
    assert rates == pytest.approx([1e-5, 1e-5, 2e-5, 1e-4, 1e-4], rel=1e-6)


def test_constant_schedule_serializes():
    schedule = ConstantSchedule(learning_rate=2e-5, warmup_steps=50, accumulation_steps=2)
    restored = keras.optimizers.schedules.deserialize(
        keras.optimizers.schedules.serialize(schedule)
    )
    assert restored.get_config() == schedule.get_config()
    assert float(restored(7)) == pytest.approx(float(schedule(7)))


def test_a_run_of_the_constant_schedule_gets_its_rate_and_the_paper_one_eq3(tmp_path):
    config = TransformerConfig.preset("base")
    fine_tuning = TrainingRun(
        tmp_path, tmp_path, learning_rate_schedule="constant", learning_rate_warmup=10
    )
    schedule = run_schedule(config, fine_tuning)
    assert isinstance(schedule, ConstantSchedule)
    assert float(schedule(9)) == pytest.approx(FINE_TUNING_LEARNING_RATE, rel=1e-6)
    paper = run_schedule(config, TrainingRun(tmp_path, tmp_path, accumulate=2))
    assert float(paper(1)) == pytest.approx(eq3(1), rel=1e-6)  # micro-batch 1: update 1
