"""The optimizer of §5.3: Adam, β1 = 0.9, β2 = 0.98 and ε = 10^-9, driven by the learning rate of
Eq. 3 (`objectives.schedule.TransformerSchedule`), or, to fine-tune a pretrained model
(`train --learning-rate-schedule constant`), by a constant rate after a short linear warmup
(`objectives.schedule.ConstantSchedule`): `run_schedule`.

Gradient accumulation (`train --accumulate N`) makes one update of N micro-batches, weighting each
by its non-padding target tokens (`TokenWeightedAccumulation`), so that the update is the one of
a single batch holding all N.

Every update also keeps the global norm of the gradients it receives (`GradientNormRecorder`),
which the training step logs as `gradient_norm`: a NaN or infinite one stops training
(`callbacks.DivergenceGuard`), or, with `skip_non_finite` set (`train --skip-bad-batches N`),
that update is skipped: nothing is applied and the step is not counted.
"""

import warnings

import keras
from keras import ops

from keras_transformer.objectives.schedule import ConstantSchedule, TransformerSchedule


class TokenWeightedAccumulation:
    """Gradient accumulation weighted by tokens, for a Keras optimizer (a mixin, listed first).

    Keras's `gradient_accumulation_steps` averages the N micro-batches' gradients with equal
    weight. Each micro-batch's loss, though, is the mean over its own n_i non-padding target
    tokens (`LabelSmoothedCrossEntropy`), so its gradient is g_i = ∇S_i / n_i, with S_i the sum of
    its token losses, and the equal-weight average Σ g_i / N is not the gradient of the whole
    batch's per-token mean when the n_i differ. This optimizer accumulates n_i·g_i = ∇S_i and
    Σ n_i, and the update applies

        Σ_i ∇S_i / Σ_i n_i,

    the gradient of the sum of token losses over all N micro-batches divided by their total
    token count: what one batch holding all N micro-batches would give. The loss tells n_i
    through `record_tokens` (`LabelSmoothedCrossEntropy(record_tokens=...)`) in each training
    step, before the gradients reach the optimizer; a step whose loss told none is an error.

    Everything else is Keras's accumulation: the optimizer's `iterations` counts updates (its
    internal counter, which the learning-rate schedule receives, counts micro-batches), the
    gradient accumulators are Keras's variables, and the running token count is one more
    optimizer variable, saved last, so a backup also holds a partial accumulation.
    `load_own_variables` still reads a backup made before that variable existed. Without
    `gradient_accumulation_steps` the optimizer is its base class unchanged.

    A single replica only: Keras's accumulation does not run under MirroredStrategy (see
    `distribution.create_strategy`), and the trainer refuses `--accumulate` with several replicas.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.gradient_accumulation_steps and self.use_ema:
            raise ValueError("token-weighted gradient accumulation does not support use_ema")
        self._recorded_tokens = None

    def build(self, variables):
        if self.built:
            return
        super().build(variables)
        if self.gradient_accumulation_steps:
            # Float32 counts tokens exactly up to 2^24 an update, far above any batch.
            self._accumulated_tokens = self.add_variable(
                (), dtype="float32", aggregation="only_first_replica", name="accumulated_tokens"
            )

    def record_tokens(self, tokens):
        """Takes the current micro-batch's non-padding target token count (the denominator of its
        mean loss; across replicas, the global count), for the update that follows."""
        # A plain attribute, no variable: the loss and the update are traced into the same step
        # function, the loss first, and the update takes it (see `_backend_apply_gradients`).
        if self.gradient_accumulation_steps:
            self._recorded_tokens = ops.cast(tokens, "float32")

    # Keras's update step and its helpers, private: declared and checked in
    # keras_internals.OPTIMIZER_HOOKS, where a Keras release that changes them fails a test.
    def _backend_apply_gradients(self, grads, trainable_variables):
        if not self.gradient_accumulation_steps:
            super()._backend_apply_gradients(grads, trainable_variables)
            return
        tokens, self._recorded_tokens = self._recorded_tokens, None
        if tokens is None:
            raise ValueError(
                "token-weighted gradient accumulation needs each micro-batch's token count: "
                "compile with loss=LabelSmoothedCrossEntropy(..., "
                "record_tokens=optimizer.record_tokens)"
            )
        # The micro-batch's loss was its token-loss sum over max(n, 1), so n·g is that sum's
        # gradient (zero for a micro-batch without tokens).
        sums = [g * ops.cast(tokens, g.dtype) for g in grads]
        # The accumulators map to the variables by index: `trainable_variables` may have been
        # filtered (as in Keras's own accumulation).
        accumulated = [
            self._accumulated_gradients[self._get_variable_index(v)] for v in trainable_variables
        ]
        total_tokens = self._accumulated_tokens + tokens
        is_update_step = (self._iterations + 1) % self.gradient_accumulation_steps == 0

        def update():
            denominator = ops.maximum(total_tokens, 1.0)
            mean = [
                (s + a) / ops.cast(denominator, s.dtype)
                for s, a in zip(sums, accumulated, strict=True)
            ]
            mean = self._clip_gradients(mean)
            self._apply_weight_decay(trainable_variables)
            self._backend_update_step(mean, trainable_variables, self.learning_rate)
            self._backend_reset_gradient_accumulators()
            self._accumulated_tokens.assign(0.0)

        def accumulate():
            self._backend_increment_gradient_accumulators(sums, accumulated)
            self._accumulated_tokens.assign(total_tokens)

        ops.cond(is_update_step, update, accumulate)

    def load_own_variables(self, store):
        # A backup written before the token count existed lacks only that last variable; its
        # accumulators then hold equal-weight sums, exact to resume from when they are zero, as
        # at every update boundary.
        if not (
            self.gradient_accumulation_steps
            and self.variables
            and len(store.keys()) == len(self.variables) - 1
        ):
            super().load_own_variables(store)
            return
        for i, variable in enumerate(self.variables[:-1]):
            variable.assign(store[str(i)])
        self._accumulated_tokens.assign(0.0)
        if any(ops.any(ops.not_equal(a, 0)) for a in self._accumulated_gradients):
            warnings.warn(
                f"optimizer '{self.name}': the backup holds a partial gradient accumulation "
                "without its token count; the first update after resuming weighs it wrongly",
                stacklevel=2,
            )


class GradientNormRecorder:
    """Keeps the global norm of the gradients each `apply` receives, for the training step that
    called it (a mixin, listed first; `take_gradient_norm`).

    A plain attribute, as `record_tokens`'s: the step and the update are traced into one
    function. Under accumulation, it is each micro-batch's gradient's norm; under
    `MirroredStrategy`, the first replica's share's, before the replicas' sum. On JAX, whose
    step is stateless, none is kept (the divergence guard watches the loss alone there).

    With `skip_non_finite`, an `apply` whose norm is NaN or infinite changes nothing: no weight,
    slot, accumulator or step counter; `take_skipped` tells the step whether it skipped. On one
    replica only (the trainer refuses more): under `MirroredStrategy` the update is a
    `merge_call`, which TensorFlow rejects inside the condition.
    """

    _gradient_norm = None
    _skipped = None
    skip_non_finite = False

    def apply(self, grads, trainable_variables=None):
        present = [g for g in grads if g is not None]
        if not (present and keras.backend.backend() == "tensorflow"):  # JAX's step keeps none
            super().apply(grads, trainable_variables)
            return
        import tensorflow as tf  # global_norm also takes an embedding's IndexedSlices

        self._gradient_norm = tf.linalg.global_norm(present)
        if not self.skip_non_finite:
            super().apply(grads, trainable_variables)
            return
        self._skipped = tf.logical_not(tf.math.is_finite(self._gradient_norm))
        update = super().apply
        tf.cond(self._skipped, lambda: None, lambda: update(grads, trainable_variables))

    def take_gradient_norm(self):
        """The norm of the gradients that the step traced now applied, once (None if none)."""
        norm, self._gradient_norm = self._gradient_norm, None
        return norm

    def take_skipped(self):
        """Whether the step traced now skipped its update (`skip_non_finite`), once."""
        skipped, self._skipped = self._skipped, None
        return skipped


@keras.saving.register_keras_serializable(package="keras_transformer")
class TransformerAdam(GradientNormRecorder, keras.optimizers.Adam):
    """`keras.optimizers.Adam` that keeps its gradients' norm."""


@keras.saving.register_keras_serializable(package="keras_transformer")
class TokenWeightedAdam(GradientNormRecorder, TokenWeightedAccumulation, keras.optimizers.Adam):
    """`keras.optimizers.Adam` with token-weighted gradient accumulation."""


def create_optimizer(config, accumulation_steps=1, schedule=None):
    """Adam(β1, β2, ε from `config`) driven by `schedule`, by default `TransformerSchedule`
    (§5.3).

    With `accumulation_steps` > 1 it is a `TokenWeightedAdam`: each update applies the gradient
    of the sum of token losses over that many micro-batches divided by their total non-padding
    target tokens, the whole batch's per-token mean, so a batch of the paper's 25k tokens fits
    in less memory. The loss must tell it each micro-batch's token count
    (`LabelSmoothedCrossEntropy(record_tokens=optimizer.record_tokens)`, as
    `trainer.compile_model` does). `iterations` counts updates. With 1 it is Adam. Either keeps
    its gradients' norm (`GradientNormRecorder`).
    """
    adam = dict(
        learning_rate=schedule or paper_schedule(config, accumulation_steps),
        beta_1=config.adam_beta_1,
        beta_2=config.adam_beta_2,
        epsilon=config.adam_epsilon,
    )
    if accumulation_steps > 1:
        return TokenWeightedAdam(**adam, gradient_accumulation_steps=accumulation_steps)
    return TransformerAdam(**adam)


def paper_schedule(config, accumulation_steps=1) -> TransformerSchedule:
    """Eq. 3 with `config`'s d_model, warmup_steps and learning_rate_scale."""
    return TransformerSchedule(
        config.d_model, config.warmup_steps, config.learning_rate_scale, accumulation_steps
    )


def run_schedule(config, run) -> keras.optimizers.schedules.LearningRateSchedule:
    """The learning rate of a `TrainingRun`: Eq. 3 (`learning_rate_schedule` "paper"), or its
    constant `learning_rate` after `learning_rate_warmup` updates ("constant"); either counts
    updates of `run.accumulate` micro-batches."""
    if run.learning_rate_schedule == "constant":
        return ConstantSchedule(run.learning_rate, run.learning_rate_warmup, run.accumulate)
    return paper_schedule(config, run.accumulate)
