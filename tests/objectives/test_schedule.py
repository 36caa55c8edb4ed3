import keras
import numpy as np
import pytest

from keras_transformer import TransformerConfig
from keras_transformer.objectives.schedule import TransformerSchedule
from keras_transformer.training.optimizer import create_optimizer


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
