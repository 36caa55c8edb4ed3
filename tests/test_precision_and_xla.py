"""Mixed precision and XLA (`jit_compile`) train without NaN, and XLA matches the plain path."""

import keras
import numpy as np
import pytest

from keras_transformer import TransformerConfig
from keras_transformer.decoding import greedy_decode
from keras_transformer.training import compile_model

CONFIG = TransformerConfig.preset("tiny", num_layers=1, warmup_steps=5)


def toy_batches(pairs=16, length=7):
    rng = np.random.default_rng(4)
    ids = rng.integers(4, CONFIG.vocab_size, size=(pairs, length)).astype("int32")
    ids[:, -2:] = 0  # some padding
    target_in = np.concatenate([np.ones((pairs, 1), "int32"), ids[:, :-1]], axis=1)
    target_in[ids == 0] = 0
    return (ids, target_in), ids


@pytest.fixture
def policy():
    yield keras.mixed_precision.set_global_policy
    keras.mixed_precision.set_global_policy("float32")


@pytest.mark.parametrize("precision", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision_trains_without_nan(policy, precision):
    policy(precision)
    x, y = toy_batches()
    model = compile_model(CONFIG)
    assert model.source_embedding.compute_dtype == precision.removeprefix("mixed_")
    losses = model.fit(x, y, batch_size=4, epochs=3, verbose=0).history["loss"]
    assert np.all(np.isfinite(losses)) and losses[-1] < losses[0]
    assert model((x[0][:1], x[1][:1])).dtype == "float32"  # logits stay float32
    # Cached decoding runs under the policy too: its cache takes the compute dtype.
    decoded = greedy_decode(model, x[0][:2], extra_length=3)
    assert np.all(np.isfinite(decoded.log_probs)) and decoded.ids.shape == (2, 7 + 3)


def test_xla_gives_the_same_losses_as_the_plain_path():
    x, y = toy_batches()
    histories = []
    for jit_compile in (False, True):
        keras.utils.set_random_seed(9)
        model = compile_model(CONFIG.replace(residual_dropout=0.0), jit_compile=jit_compile)
        histories.append(model.fit(x, y, batch_size=4, epochs=2, verbose=0).history["loss"])
    np.testing.assert_allclose(histories[1], histories[0], rtol=1e-4)
    assert np.all(np.isfinite(histories[1]))
