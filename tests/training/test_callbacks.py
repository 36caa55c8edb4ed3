"""Callbacks that report on training: throughput from training batches only; stopping on a
validation-loss plateau."""

import time
from types import SimpleNamespace

from keras_transformer.training.callbacks import StopOnPlateau, TokenThroughput


def test_epoch_throughput_is_the_training_rate_not_the_validation_count():
    callback = TokenThroughput()
    callback.on_epoch_begin(0)
    time.sleep(0.05)
    batch_logs = {"target_tokens": 1000.0}
    callback.on_train_batch_end(0, batch_logs)
    rate = batch_logs["target_tokens_per_s"]
    assert 1000 / 0.5 < rate < 1000 / 0.05 * 1.01
    time.sleep(0.05)  # validation runs here
    epoch_logs = {"target_tokens": 1000.0, "val_target_tokens": 7.0}
    callback.on_epoch_end(0, epoch_logs)
    assert epoch_logs["target_tokens_per_s"] == rate


def test_trace_counter_counts_traces_once_per_shape_not_per_batch():
    import keras
    import numpy as np
    import tensorflow as tf

    from keras_transformer.training.callbacks import TraceCounter

    inputs = keras.Input((None,))
    model = keras.Model(inputs, keras.layers.Dense(1)(inputs[..., None]))
    model.compile("sgd", "mse")
    shapes = [(4, 3), (2, 6)] * 3  # two bucket shapes, three batches each
    batches = [(np.ones(s, "float32"), np.ones(s + (1,), "float32")) for s in shapes]
    dataset = tf.data.Dataset.from_generator(
        lambda: iter(batches),
        output_signature=(
            tf.TensorSpec((None, None), tf.float32),
            tf.TensorSpec((None, None, 1), tf.float32),
        ),
    ).apply(tf.data.experimental.assert_cardinality(len(batches)))  # no ran-out-of-data warning
    counter = TraceCounter()
    history = model.fit(dataset, epochs=3, callbacks=[counter], shuffle=False, verbose=0)
    traces = history.history["train_traces"]
    assert 1 <= traces[0] <= 2 and traces == [traces[0]] * 3
    assert "train_step" not in vars(model) or model.train_step == counter._train_step


def test_epoch_logs_keep_the_training_token_count_through_validation():
    import keras
    import numpy as np

    from keras_transformer.objectives.metrics import TargetTokens

    ids = np.ones((8, 3), "int32")
    targets = ids.copy()
    targets[:, 2] = 0  # padding: two real tokens a row
    model = keras.Sequential([keras.layers.Embedding(5, 4), keras.layers.Dense(5)])
    model.compile(
        "sgd",
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=[TargetTokens()],
    )
    history = model.fit(
        ids, targets, validation_data=(ids[:2], targets[:2]), batch_size=4, epochs=1, verbose=0
    )
    assert history.history["target_tokens"] == [16.0]
    assert history.history["val_target_tokens"] == [4.0]


def test_plateau_counts_epochs_since_the_best_validation_loss_across_a_resume():
    stop = StopOnPlateau(3, history=[3.0, 2.5, 2.6])  # the epochs before the resume
    stop.set_model(SimpleNamespace(stop_training=False))
    assert (stop.best, stop.stale_epochs, stop.plateaued) == (2.5, 1, False)
    stop.on_epoch_end(3, {"loss": 2.0})  # no validation this epoch: nothing counted
    stop.on_epoch_end(4, {"val_loss": 2.5})  # equal is not better
    assert stop.stale_epochs == 2 and not stop.model.stop_training
    stop.on_epoch_end(5, {"val_loss": 2.4})
    assert (stop.best, stop.stale_epochs) == (2.4, 0)
    for epoch, loss in enumerate([2.45, 2.41], start=6):
        stop.on_epoch_end(epoch, {"val_loss": loss})
    assert not stop.model.stop_training
    stop.on_epoch_end(8, {"val_loss": 2.7})
    assert stop.plateaued and stop.model.stop_training


def test_an_epoch_cut_short_by_a_batch_is_not_counted_for_patience():
    stop = StopOnPlateau(1, history=[2.0])
    stop.set_model(SimpleNamespace(stop_training=True))  # --max-minutes stopped it mid-epoch
    stop.on_epoch_end(3, {"val_loss": 2.5})  # the rerun trains epoch 3 again
    assert stop.stale_epochs == 0 and not stop.plateaued


def test_progress_log_gives_the_recent_rate_and_the_time_left(caplog):
    from keras_transformer.training.callbacks import ProgressLog

    now = [100.0]
    progress = ProgressLog(every_steps=10, max_steps=100, clock=lambda: now[0])
    step = [0]
    iterations = SimpleNamespace(numpy=lambda: step[0])
    progress.set_model(SimpleNamespace(optimizer=SimpleNamespace(iterations=iterations)))
    progress.on_train_begin()
    caplog.set_level("INFO", logger="keras_transformer.training.callbacks")
    # A slow first stretch (compilation), then 5 updates a second.
    for step[0], seconds in ((10, 40.0), (20, 2.0)):
        now[0] += seconds
        progress.on_train_batch_end(step[0], {"loss": 3.25, "target_tokens_per_s": 4200.0})
    first, second = (record.getMessage() for record in caplog.records)
    assert first.startswith("step 10/100 (10%), loss 3.250, 0.25 updates/s, 4,200 tokens/s")
    assert first.endswith("ETA 6m00s")  # 90 steps at 0.25 a second
    assert second == "step 20/100 (20%), loss 3.250, 5.00 updates/s, 4,200 tokens/s, ETA 16s"


def test_progress_log_counts_down_a_time_budget_first():
    from keras_transformer.training.callbacks import ProgressLog, duration

    progress = ProgressLog(every_steps=1, max_steps=1000, max_minutes=2, clock=lambda: 0.0)
    progress._start = 0.0
    assert progress.seconds_left(step=10, rate=1.0, now=30.0) == 90.0  # the budget, not 990 s
    assert ProgressLog(1, clock=lambda: 0.0).seconds_left(10, 1.0, 30.0) is None
    assert [duration(s) for s in (3725, 285, 9.4)] == ["1h02m05s", "4m45s", "9s"]
