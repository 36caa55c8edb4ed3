"""Positional encoding (§3.5), FFN (Eq. 2), Add & Norm (§3.1), shared embedding (§3.4)."""

import math

import numpy as np
import pytest
from keras import ops

from keras_transformer import keras_internals
from keras_transformer.layers.add_and_norm import AddAndNorm
from keras_transformer.layers.decoder_layer import DecoderLayer
from keras_transformer.layers.dropout import GOLDEN, Dropout, hashed_uniform_bits
from keras_transformer.layers.embeddings import SharedEmbedding
from keras_transformer.layers.encoder_layer import EncoderLayer
from keras_transformer.layers.position_wise_feed_forward import PositionWiseFeedForward
from keras_transformer.layers.positional_encoding import (
    LearnedPositionalEmbedding,
    SinusoidalPositionalEncoding,
)
from layer_testing import assert_config_round_trip


def paper_positional_encoding(length, d_model):
    """§3.5, written loop by loop from the formula."""
    pe = np.zeros((length, d_model))
    for pos in range(length):
        for i in range(d_model // 2):
            pe[pos, 2 * i] = math.sin(pos / 10000 ** (2 * i / d_model))
            pe[pos, 2 * i + 1] = math.cos(pos / 10000 ** (2 * i / d_model))
    return pe


def test_sinusoidal_encoding_equals_section_3_5():
    layer = SinusoidalPositionalEncoding()
    out = ops.convert_to_numpy(layer(np.zeros((2, 50, 64), "float32")))
    np.testing.assert_allclose(out[1], paper_positional_encoding(50, 64), atol=2e-5)


def test_sinusoids_in_halves_are_all_sines_then_all_cosines():
    layer = SinusoidalPositionalEncoding(layout="halves")
    out = ops.convert_to_numpy(layer(np.zeros((1, 50, 64), "float32")))[0]
    paper = paper_positional_encoding(50, 64)
    np.testing.assert_allclose(out, np.concatenate([paper[:, 0::2], paper[:, 1::2]], 1), atol=2e-5)
    assert_config_round_trip(layer, np.zeros((1, 3, 8), "float32"))


def test_sinusoidal_encoding_with_start_index_is_a_slice():
    layer = SinusoidalPositionalEncoding()
    out = ops.convert_to_numpy(layer(np.zeros((1, 1, 16), "float32"), start_index=7))
    np.testing.assert_allclose(out[0, 0], paper_positional_encoding(8, 16)[7], atol=1e-5)


def test_learned_positions_are_a_trained_table():
    layer = LearnedPositionalEmbedding(max_length=10)
    out = ops.convert_to_numpy(layer(np.zeros((1, 3, 4), "float32"), start_index=2))
    np.testing.assert_allclose(out[0], ops.convert_to_numpy(layer.position_embeddings)[2:5])
    assert_config_round_trip(layer, np.zeros((1, 3, 4), "float32"))


def test_feed_forward_is_eq2():
    layer = PositionWiseFeedForward(d_ff=16)
    x = np.random.default_rng(0).normal(size=(2, 3, 8)).astype("float32")
    w1, b1, w2, b2 = (ops.convert_to_numpy(w) for w in (*layer_weights(layer, x),))
    np.testing.assert_allclose(
        ops.convert_to_numpy(layer(x)), np.maximum(0, x @ w1 + b1) @ w2 + b2, atol=1e-5
    )
    assert_config_round_trip(layer, x)


@pytest.mark.parametrize(
    "activation, reference",
    [
        ("swish", lambda h: h / (1.0 + np.exp(-h))),
        ("gelu", lambda h: 0.5 * h * (1.0 + np.vectorize(math.erf)(h / math.sqrt(2.0)))),
    ],
)
def test_feed_forward_takes_the_activation_of_pretrained_models(activation, reference):
    layer = PositionWiseFeedForward(d_ff=16, activation=activation)
    x = np.random.default_rng(0).normal(size=(2, 3, 8)).astype("float32")
    w1, b1, w2, b2 = (ops.convert_to_numpy(w) for w in (*layer_weights(layer, x),))
    np.testing.assert_allclose(
        ops.convert_to_numpy(layer(x)), reference(x @ w1 + b1) @ w2 + b2, atol=1e-5
    )
    assert_config_round_trip(layer, x)


def layer_weights(layer, x):
    layer(x)
    return layer.inner.kernel, layer.inner.bias, layer.outer.kernel, layer.outer.bias


def test_add_and_norm_is_layernorm_of_the_residual_sum():
    x, y = np.random.default_rng(1).normal(size=(2, 2, 3, 8)).astype("float32")
    out = ops.convert_to_numpy(AddAndNorm(residual_dropout=0.5)(x, y, training=False))
    s = x + y
    expected = (s - s.mean(-1, keepdims=True)) / np.sqrt(s.var(-1, keepdims=True) + 1e-6)
    np.testing.assert_allclose(out, expected, atol=1e-4)
    assert_config_round_trip(AddAndNorm(residual_dropout=0.1), x, y)


def test_shared_embedding_scales_by_sqrt_d_model_and_ties_the_projection():
    layer = SharedEmbedding(vocab_size=11, d_model=16)
    ids = np.array([[3, 4]])
    hidden = ops.convert_to_numpy(layer(ids))
    table = ops.convert_to_numpy(layer.embeddings)
    np.testing.assert_allclose(hidden[0], table[[3, 4]] * 4.0, atol=1e-6)
    np.testing.assert_allclose(
        ops.convert_to_numpy(layer.logits(hidden)), hidden @ table.T, atol=1e-4
    )
    assert_config_round_trip(layer, ids)


def test_shared_embedding_with_an_output_bias_adds_it_to_the_logits():
    layer = SharedEmbedding(vocab_size=11, d_model=16, output_bias=True)
    hidden = ops.convert_to_numpy(layer(np.array([[3, 4]])))
    bias = np.arange(11, dtype="float32")
    layer.logits_bias.assign(bias)
    table = ops.convert_to_numpy(layer.embeddings)
    np.testing.assert_allclose(
        ops.convert_to_numpy(layer.logits(hidden)), hidden @ table.T + bias, atol=1e-4
    )
    assert_config_round_trip(layer, np.array([[3, 4]]))


def test_encoder_and_decoder_layers_round_trip():
    args = dict(num_heads=2, d_k=4, d_v=4, d_ff=16, residual_dropout=0.1)
    x = np.random.default_rng(2).normal(size=(2, 3, 8)).astype("float32")
    memory = np.random.default_rng(3).normal(size=(2, 5, 8)).astype("float32")
    assert_config_round_trip(EncoderLayer(**args), x)
    assert_config_round_trip(DecoderLayer(**args), x, memory)


def reference_fmix(h):
    """MurmurHash3's 32-bit finalizer in NumPy, written from its definition."""
    with np.errstate(over="ignore"):
        h = (h ^ (h >> np.uint32(16))) * np.uint32(0x85EBCA6B)
        h = (h ^ (h >> np.uint32(13))) * np.uint32(0xC2B2AE35)
        return h ^ (h >> np.uint32(16))


def hashed_masks(seed, calls=2, jit_compile=True):
    import tensorflow as tf

    layer = Dropout(0.1, seed=seed)
    layer.hashed_masks = True
    step = tf.function(lambda x: layer(x, training=True), jit_compile=jit_compile)
    x = tf.ones((64, 24, 256))
    return [ops.convert_to_numpy(step(x)) for _ in range(calls)]


def test_hashed_bits_are_murmur3_finalizers_of_the_index_keyed_by_the_seed():
    seed = np.array([7, 2], np.uint32)
    with np.errstate(over="ignore"):
        first_key = reference_fmix(seed[0] ^ reference_fmix(seed[1] + np.uint32(GOLDEN)))
        second_key = reference_fmix(first_key + np.uint32(GOLDEN))
    index = np.arange(6 * 5, dtype=np.uint32)
    expected = reference_fmix(reference_fmix(index ^ first_key) ^ second_key).reshape(6, 5)
    bits = hashed_uniform_bits(np.zeros((6, 5), "float32"), seed)
    np.testing.assert_array_equal(ops.convert_to_numpy(bits), expected)


def test_hashed_dropout_under_xla_drops_at_the_rate_and_repeats_with_the_seed():
    first, second = hashed_masks(seed=3)
    again, _ = hashed_masks(seed=3)
    assert set(np.unique(first).tolist()) == {0.0, np.float32(1 / 0.9)}
    assert abs((first == 0).mean() - 0.1) < 0.005  # 393,216 draws: 0.005 is 10 sigma
    np.testing.assert_array_equal(first, again)  # the seed fixes the masks
    assert abs((first != second).mean() - 2 * 0.1 * 0.9) < 0.006  # each call draws new ones
    # XLA computes the same masks as the operations run one by one.
    np.testing.assert_array_equal(first, hashed_masks(seed=3, calls=1, jit_compile=False)[0])


def test_hashed_dropout_masks_are_independent_between_elements_and_seeds():
    dropped = {seed: hashed_masks(seed, calls=1)[0] == 0 for seed in range(4)}
    for mask in dropped.values():
        flat = mask.ravel()
        for offset in (1, 256):  # the next feature, the next position
            assert abs((flat[offset:] & flat[:-offset]).mean() - 0.1**2) < 0.002  # 12 sigma
    # Small seeds differ only in their low bits: keyed by the seed itself, each seed would get
    # the same mask with its indices permuted, and so the same count of drops.
    assert len({int(mask.sum()) for mask in dropped.values()}) == len(dropped)
    assert abs((dropped[0] & dropped[1]).mean() - 0.1**2) < 0.002


def test_transformer_compile_picks_hashed_masks_only_for_xla():
    from keras_transformer import Transformer, TransformerConfig

    model = Transformer(TransformerConfig.preset("tiny"))
    dropouts = [layer for layer in keras_internals.sublayers(model) if isinstance(layer, Dropout)]
    assert len(dropouts) >= 2 * 3  # embeddings, and every sub-layer's residual dropout
    model.compile(optimizer="adam", loss="mse", jit_compile=True)
    assert {layer.hashed_masks for layer in dropouts} == {True}
    model.compile(optimizer="adam", loss="mse", jit_compile=False)
    assert {layer.hashed_masks for layer in dropouts} == {False}


def test_layer_normalization_equals_keras_in_value_and_gradient_under_xla():
    import keras
    import tensorflow as tf

    from keras_transformer.layers.layer_normalization import LayerNormalization

    x = tf.constant(np.random.default_rng(3).normal(2.0, 3.0, size=(4, 5, 128)), tf.float32)
    ours = LayerNormalization(epsilon=1e-6)
    reference = keras.layers.LayerNormalization(epsilon=1e-6)
    for layer in (ours, reference):
        layer.build(x.shape)
        layer.gamma.assign(np.linspace(0.5, 1.5, 128))
        layer.beta.assign(np.linspace(-1.0, 1.0, 128))

    @tf.function(jit_compile=True)
    def value_and_gradients(layer, x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = layer(x)
            loss = tf.reduce_sum(y * tf.sin(y))
        return (y, *tape.gradient(loss, [x, layer.gamma, layer.beta]))

    for got, want in zip(
        value_and_gradients(ours, x), value_and_gradients(reference, x), strict=True
    ):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-4, atol=1e-4)
    assert_config_round_trip(ours, x)
