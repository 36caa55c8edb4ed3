"""The learning rate of §5.3, Eq. 3: linear warmup, then the inverse square root of the step.

    lrate = d_model^-0.5 · min(step_num^-0.5, step_num · warmup_steps^-1.5)

"This corresponds to increasing the learning rate linearly for the first warmup_steps training
steps, and decreasing it thereafter proportionally to the inverse square root of the step number."

Beside it, `ConstantSchedule`, for fine-tuning a pretrained model: Eq. 3 peaks near 7e-4 for
`base` (at step_num = warmup_steps), a rate that moves pretrained weights far from where they
were; a constant rate one or two orders of magnitude lower, reached by a short linear warmup,
adapts them instead.
"""

import keras
from keras import ops


def update_number(step, accumulation_steps):
    """The 1-based number of the update (float32) an optimizer `step` belongs to, when each update
    accumulates `accumulation_steps` steps: Eq. 3's step_num counts updates."""
    return ops.cast(ops.floor_divide(step, accumulation_steps), "float32") + 1.0


@keras.saving.register_keras_serializable(package="keras_transformer")
class TransformerSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Eq. 3, optionally multiplied by a constant `scale` (1.0 is the paper).

    Step offset: Keras passes the optimizer's iteration count, which is 0 for the first update,
    while Eq. 3 counts `step_num` from 1 (at 0 it would give a zero learning rate). So
    `schedule(iteration)` returns Eq. 3 at `step_num = iteration + 1`.

    Gradient accumulation: Keras then passes the count of micro-batches, and an update (one
    `step_num`) takes `accumulation_steps` of them.

    Args:
        d_model: model width.
        warmup_steps: steps of linear warmup (4000 in the paper).
        scale: constant factor; runs much shorter than the paper's may want a larger rate.
        accumulation_steps: micro-batches per update (1: none).

    Example:
    >>> schedule = TransformerSchedule(d_model=512, warmup_steps=4000)
    >>> round(float(schedule(3999)), 8)  # step_num 4000, the peak: 512^-0.5 * 4000^-0.5
    0.00069877
    """

    def __init__(self, d_model, warmup_steps=4000, scale=1.0, accumulation_steps=1):
        self.d_model = d_model
        self.warmup_steps = warmup_steps
        self.scale = scale
        self.accumulation_steps = accumulation_steps

    def __call__(self, step):
        step_num = update_number(step, self.accumulation_steps)
        return (
            self.scale
            * self.d_model**-0.5
            * ops.minimum(ops.rsqrt(step_num), step_num * self.warmup_steps**-1.5)
        )

    def get_config(self):
        return {
            "d_model": self.d_model,
            "warmup_steps": self.warmup_steps,
            "scale": self.scale,
            "accumulation_steps": self.accumulation_steps,
        }


@keras.saving.register_keras_serializable(package="keras_transformer")
class ConstantSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """A constant learning rate after a short linear warmup, for fine-tuning:

        lrate = learning_rate · min(1, step_num / warmup_steps)

    (`learning_rate` throughout where `warmup_steps` is 0).

    Step offset and gradient accumulation as in `TransformerSchedule`: `schedule(iteration)` is
    the rate at `step_num = iteration // accumulation_steps + 1`, so the first update already
    moves the weights (at `learning_rate / warmup_steps`).

    Args:
        learning_rate: the rate once warmed up.
        warmup_steps: updates of linear warmup (0: none).
        accumulation_steps: micro-batches per update (1: none).

    Example:
    >>> schedule = ConstantSchedule(learning_rate=5e-5, warmup_steps=100)
    >>> [round(float(schedule(step)), 10) for step in (0, 49, 99, 5000)]
    [5e-07, 2.5e-05, 5e-05, 5e-05]
    """

    def __init__(self, learning_rate, warmup_steps=0, accumulation_steps=1):
        self.learning_rate = learning_rate
        self.warmup_steps = warmup_steps
        self.accumulation_steps = accumulation_steps

    def __call__(self, step):
        step_num = update_number(step, self.accumulation_steps)
        warmed_up = ops.minimum(1.0, step_num / max(self.warmup_steps, 1))
        return self.learning_rate * warmed_up

    def get_config(self):
        return {
            "learning_rate": self.learning_rate,
            "warmup_steps": self.warmup_steps,
            "accumulation_steps": self.accumulation_steps,
        }
