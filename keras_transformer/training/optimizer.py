"""The optimizer of §5.3: Adam with the warmup-then-inverse-square-root schedule of Eq. 3.

    lrate = d_model^-0.5 · min(step_num^-0.5, step_num · warmup_steps^-1.5)

"This corresponds to increasing the learning rate linearly for the first warmup_steps training
steps, and decreasing it thereafter proportionally to the inverse square root of the step number."
Adam uses β1 = 0.9, β2 = 0.98 and ε = 10^-9.
"""

import keras
from keras import ops


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
        update = ops.floor_divide(step, self.accumulation_steps)
        step_num = ops.cast(update, "float32") + 1.0
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


def create_optimizer(config, accumulation_steps=1):
    """Adam(β1, β2, ε from `config`) driven by `TransformerSchedule` (§5.3).

    With `accumulation_steps` > 1 each update averages the gradients of that many
    micro-batches, so a batch of the paper's 25k tokens fits in less memory; `iterations`
    counts updates.
    """
    return keras.optimizers.Adam(
        learning_rate=TransformerSchedule(
            config.d_model, config.warmup_steps, config.learning_rate_scale, accumulation_steps
        ),
        beta_1=config.adam_beta_1,
        beta_2=config.adam_beta_2,
        epsilon=config.adam_epsilon,
        gradient_accumulation_steps=accumulation_steps if accumulation_steps > 1 else None,
    )
