"""The assembled model: masking, cached decoding, serialization, parameter counts."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras import ops

import keras_transformer.model.transformer as transformer_module
from keras_transformer import Transformer, TransformerConfig
from keras_transformer.analysis.parameter_count import count_parameters

SOURCE = np.array([[5, 6, 7, 8, 2, 0, 0], [9, 10, 2, 0, 0, 0, 0]], "int32")
TARGET_IN = np.array([[1, 11, 12, 13, 14], [1, 15, 16, 0, 0]], "int32")


@pytest.fixture(scope="module")
def tiny_model():
    keras.utils.set_random_seed(7)
    model = Transformer(TransformerConfig.preset("tiny"))
    model((SOURCE, TARGET_IN))
    return model


def logits(model, source, target):
    return ops.convert_to_numpy(model((source, target), training=False))


def perturb_future_target(model):
    """Changes target position 3 and returns the max change of logits at positions 0..2."""
    changed = TARGET_IN.copy()
    changed[:, 3] = 99
    return np.abs(logits(model, SOURCE, changed) - logits(model, SOURCE, TARGET_IN))[:, :3].max()


def test_future_target_tokens_do_not_change_earlier_outputs(tiny_model):
    assert perturb_future_target(tiny_model) < 1e-6


def test_without_the_causal_mask_the_future_leaks(tiny_model, monkeypatch):
    monkeypatch.setattr(
        transformer_module,
        "decoder_self_attention_mask",
        lambda target_mask: ops.ones_like(target_mask)[:, None, None, :],
    )
    assert perturb_future_target(tiny_model) > 1e-3


def padded_source_change(model):
    """Max change of the logits when padded source positions hold other (masked) values.

    The source padding mask is taken from the original ids, so positions stay padding while the
    vectors behind them change: attention must not read them.
    """
    source_mask = ops.not_equal(SOURCE, 0)
    embedded = model.source_embedding(SOURCE)
    noise = np.random.default_rng(0).normal(size=embedded.shape).astype("float32")
    noisy = embedded + noise * (1.0 - ops.convert_to_numpy(source_mask)[..., None])

    def run(source_embedded):
        x = model.source_positions(source_embedded)
        attention_mask = transformer_module.key_padding_attention_mask(source_mask)
        for layer in model.encoder_layers:
            x = layer(x, attention_mask=attention_mask)
        return ops.convert_to_numpy(model.decode(TARGET_IN, x, source_mask))

    return np.abs(run(noisy) - run(embedded)).max()


def test_padded_source_positions_do_not_change_outputs(tiny_model):
    assert padded_source_change(tiny_model) < 1e-6


def test_without_the_padding_mask_padding_leaks(tiny_model, monkeypatch):
    monkeypatch.setattr(
        transformer_module,
        "key_padding_attention_mask",
        lambda mask: ops.ones_like(mask)[:, None, None, :],
    )
    assert padded_source_change(tiny_model) > 1e-3


def test_padding_id_itself_is_masked(tiny_model):
    """Appending more padding to the source changes nothing."""
    longer = np.concatenate([SOURCE, np.zeros((2, 4), "int32")], axis=1)
    np.testing.assert_allclose(
        logits(tiny_model, longer, TARGET_IN), logits(tiny_model, SOURCE, TARGET_IN), atol=1e-5
    )


@pytest.mark.parametrize("positional_encoding", ["sinusoidal", "learned"])
def test_cached_decoding_equals_the_full_pass(positional_encoding):
    model = Transformer(TransformerConfig.preset("tiny", positional_encoding=positional_encoding))
    full = logits(model, SOURCE, TARGET_IN)
    encoder_output, source_mask = model.encode(SOURCE)
    cache = model.init_cache(encoder_output, max_length=8)
    for step in range(TARGET_IN.shape[1]):
        step_logits, cache = model.decode_step(TARGET_IN[:, step], step, cache, source_mask)
        real = TARGET_IN[:, step] != 0  # decoding never feeds padding; the full pass masks it
        np.testing.assert_allclose(
            ops.convert_to_numpy(step_logits)[real], full[real, step], atol=1e-5
        )


def test_cache_is_preallocated_and_written_at_the_step():
    model = Transformer(TransformerConfig.preset("tiny"))
    encoder_output, source_mask = model.encode(SOURCE)
    cache = model.init_cache(encoder_output, max_length=8)
    _, cache = model.decode_step(TARGET_IN[:, 0], 0, cache, source_mask)
    self_key = ops.convert_to_numpy(cache[0]["self_key"])
    assert self_key.shape == (2, 4, 16, 8)
    assert np.abs(self_key[..., 0]).sum() > 0 and np.all(self_key[..., 1:] == 0)
    assert cache[0]["cross_key"].shape == (2, 4, 16, SOURCE.shape[1])


def test_decode_step_holds_no_op_that_only_xla_runs(tiny_model):
    # Outside XLA, TensorFlow runs such an op (slice_update's XlaDynamicUpdateSlice) by
    # compiling it for each new input shape; the compacted search's shapes change as sentences
    # leave the batch, so a served batch would compile again and again.
    encoder_output, source_mask = tiny_model.encode(SOURCE)
    cache = tiny_model.init_cache(encoder_output, max_length=8)
    step = tf.function(
        lambda ids, step, cache: tiny_model.decode_step(ids, step, cache, source_mask)
    )
    graph = step.get_concrete_function(TARGET_IN[:, 0], tf.constant(0), cache).graph
    assert [op.type for op in graph.get_operations() if op.type.startswith("Xla")] == []


def test_keras_file_round_trip_gives_identical_outputs(tiny_model, tmp_path):
    path = tmp_path / "tiny.keras"
    tiny_model.save(path)
    restored = keras.models.load_model(path)
    assert restored.config == tiny_model.config
    np.testing.assert_array_equal(
        logits(restored, SOURCE, TARGET_IN), logits(tiny_model, SOURCE, TARGET_IN)
    )


def test_dropout_is_active_only_in_training(tiny_model):
    a = ops.convert_to_numpy(tiny_model((SOURCE, TARGET_IN), training=True))
    b = ops.convert_to_numpy(tiny_model((SOURCE, TARGET_IN), training=True))
    assert not np.allclose(a, b)
    np.testing.assert_array_equal(
        logits(tiny_model, SOURCE, TARGET_IN), logits(tiny_model, SOURCE, TARGET_IN)
    )


@pytest.mark.parametrize(
    "changes",
    [
        {},
        dict(num_heads=2, d_k=24, d_v=8),
        dict(positional_encoding="learned"),
        dict(target_vocab_size=700),
        dict(target_vocab_size=700, tie_embeddings=False),
    ],
)
def test_parameter_formula_is_exact(changes):
    config = TransformerConfig.preset("tiny", **changes)
    model = Transformer(config)
    assert model.count_params() == count_parameters(config)


def test_separate_vocabularies_give_target_sized_logits():
    model = Transformer(TransformerConfig.preset("tiny", target_vocab_size=700))
    assert logits(model, SOURCE, TARGET_IN).shape == (2, 5, 700)
    assert model.source_embedding is not model.target_embedding


@pytest.mark.parametrize("name, paper_millions", [("base", 65), ("big", 213)])
def test_paper_models_match_table3_parameter_counts(name, paper_millions):
    config = TransformerConfig.preset(name, vocab_size=37000)
    assert abs(count_parameters(config) / 1e6 - paper_millions) / paper_millions < 0.05
    if name == "base":  # building big takes seconds and 1 GB; the formula is proven exact above
        model = Transformer(config)
        assert model.count_params() == count_parameters(config)
