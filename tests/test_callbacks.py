"""Callbacks that report on training: throughput from training batches only."""

import time

from keras_transformer.callbacks import TokenThroughput


def test_epoch_throughput_is_the_training_rate_not_the_validation_count():
    callback = TokenThroughput()
    callback.on_epoch_begin(0)
    time.sleep(0.05)
    batch_logs = {"target_tokens": 1000.0}
    callback.on_train_batch_end(0, batch_logs)
    rate = batch_logs["target_tokens_per_s"]
    assert 1000 / 0.5 < rate < 1000 / 0.05 * 1.01
    time.sleep(0.05)  # validation runs here and resets target_tokens to its own count
    epoch_logs = {"target_tokens": 7.0, "val_target_tokens": 7.0}
    callback.on_epoch_end(0, epoch_logs)
    assert epoch_logs["target_tokens_per_s"] == rate
