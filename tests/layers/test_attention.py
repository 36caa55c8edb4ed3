"""Eq. 1 and §3.2.2 against NumPy written from the paper's formulas."""

import keras
import numpy as np
import pytest
from keras import ops

from keras_transformer.config import ConfigError, TransformerConfig
from keras_transformer.layers.decoder_layer import DecoderLayer
from keras_transformer.layers.encoder_layer import EncoderLayer
from keras_transformer.layers.head_projection import HeadProjection
from keras_transformer.layers.multi_head_attention import MultiHeadAttention
from keras_transformer.layers.scaled_dot_product_attention import scaled_dot_product_attention
from keras_transformer.model.transformer import Transformer
from layer_testing import assert_config_round_trip


def numpy_softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_scaled_dot_product_attention_is_eq1():
    rng = np.random.default_rng(0)
    q, k = rng.normal(size=(2, 1, 3, 8)), rng.normal(size=(2, 1, 5, 8))
    v = rng.normal(size=(2, 1, 5, 6))
    k_transposed = k.transpose(0, 1, 3, 2)
    output, weights = scaled_dot_product_attention(
        *(x.astype("float32") for x in (q, k_transposed, v))
    )
    expected_weights = numpy_softmax(q[:, 0] @ k[:, 0].transpose(0, 2, 1) / np.sqrt(8))
    np.testing.assert_allclose(ops.convert_to_numpy(weights)[:, 0], expected_weights, atol=1e-5)
    np.testing.assert_allclose(
        ops.convert_to_numpy(output)[:, 0], expected_weights @ v[:, 0], atol=1e-5
    )


def test_masked_positions_get_exactly_zero_weight():
    x = np.random.default_rng(1).normal(size=(1, 2, 4, 8)).astype("float32")
    mask = np.array([True, True, False, False])[None, None, None, :]
    _, weights = scaled_dot_product_attention(x, x.transpose(0, 1, 3, 2), x, mask=mask)
    weights = ops.convert_to_numpy(weights)
    assert np.all(weights[..., 2:] == 0.0)
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-6)


def test_multi_head_attention_matches_per_head_numpy():
    rng = np.random.default_rng(2)
    layer = MultiHeadAttention(num_heads=2, d_k=3, d_v=5)
    query = rng.normal(size=(1, 4, 8)).astype("float32")
    memory = rng.normal(size=(1, 6, 8)).astype("float32")
    output = ops.convert_to_numpy(layer(query, memory))
    wq, bq = (ops.convert_to_numpy(w) for w in layer.query_dense.weights)
    wk, bk = (ops.convert_to_numpy(w) for w in layer.key_dense.weights)
    wv, bv = (ops.convert_to_numpy(w) for w in layer.value_dense.weights)
    wo, bo = (ops.convert_to_numpy(w) for w in layer.output_dense.weights)
    heads = []
    for i in range(2):
        q = query[0] @ wq[:, i] + bq[i]
        k = memory[0] @ wk[:, i] + bk[i]
        v = memory[0] @ wv[:, i] + bv[i]
        heads.append(numpy_softmax(q @ k.T / np.sqrt(3)) @ v)
    expected = np.concatenate(heads, -1) @ wo.reshape(2 * 5, 8) + bo  # Concat(heads) W^O
    np.testing.assert_allclose(output[0], expected, atol=1e-5)


class QueryProjection(keras.layers.Layer):
    """Holds a projection as `MultiHeadAttention` does: checkpoints name it by this attribute."""

    def __init__(self, projection):
        super().__init__()
        self.query_dense = projection

    def call(self, inputs):
        return self.query_dense(inputs)


def test_head_projection_loads_einsum_dense_checkpoints_and_equals_it_relaid_out(tmp_path):
    """Runs trained when the projections were `EinsumDense("btm,mhd->bthd")` load unchanged."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(2, 4, 8)).astype("float32")
    dense = keras.layers.EinsumDense("btm,mhd->bthd", output_shape=(None, 2, 3), bias_axes="hd")
    einsum_model = keras.Sequential([keras.Input((4, 8)), QueryProjection(dense)])
    dense.bias.assign(rng.normal(size=(2, 3)).astype("float32"))
    expected = ops.convert_to_numpy(einsum_model(x))  # [batch, length, heads, depth]
    einsum_model.save_weights(tmp_path / "einsum.weights.h5")
    for transposed, axes in ((False, (0, 2, 1, 3)), (True, (0, 2, 3, 1))):
        projection = HeadProjection(num_heads=2, depth=3, transposed=transposed)
        model = keras.Sequential([keras.Input((4, 8)), QueryProjection(projection)])
        model.load_weights(tmp_path / "einsum.weights.h5")
        np.testing.assert_allclose(
            ops.convert_to_numpy(model(x)), expected.transpose(axes), atol=1e-6
        )
        assert_config_round_trip(projection, x)


def test_head_projection_starts_narrower_than_einsum_dense_as_measured():
    """Glorot over the 3-D kernel: limit √(6 / ((h + depth)·d_model)), not EinsumDense's
    √(6 / (d_model + h·depth)). A refactor that changes it changes every trained result."""
    d_model, heads, depth = 128, 4, 32  # the multi30k preset's
    x = np.zeros((1, 2, d_model), "float32")
    projection = HeadProjection(num_heads=heads, depth=depth)
    dense = keras.layers.EinsumDense(
        "btm,mhd->bthd", output_shape=(None, heads, depth), bias_axes="hd"
    )
    projection(x), dense(x)
    limit = np.sqrt(6 / ((heads + depth) * d_model))
    kernel = ops.convert_to_numpy(projection.kernel)
    assert np.abs(kernel).max() <= limit * (1 + 1e-6)  # float32 rounding of the bounds
    np.testing.assert_allclose(kernel.std(), limit / np.sqrt(3), rtol=0.03)
    narrower = ops.convert_to_numpy(dense.kernel).std() / kernel.std()
    np.testing.assert_allclose(narrower, np.sqrt(18), rtol=0.03)


def test_head_projection_matrix_fan_starts_at_einsum_dense_scale():
    """`initializer_fan="matrix"`: Glorot over the `[d_model, h·depth]` matrix, limit
    √(6 / (d_model + h·depth)), the spread EinsumDense gives the same kernel."""
    d_model, heads, depth = 128, 4, 32
    x = np.zeros((1, 2, d_model), "float32")
    projection = HeadProjection(num_heads=heads, depth=depth, initializer_fan="matrix")
    dense = keras.layers.EinsumDense(
        "btm,mhd->bthd", output_shape=(None, heads, depth), bias_axes="hd"
    )
    projection(x), dense(x)
    limit = np.sqrt(6 / (d_model + heads * depth))
    kernel = ops.convert_to_numpy(projection.kernel)
    assert kernel.shape == (d_model, heads, depth)
    assert np.abs(kernel).max() <= limit * (1 + 1e-6)
    np.testing.assert_allclose(kernel.std(), limit / np.sqrt(3), rtol=0.03)
    np.testing.assert_allclose(kernel.std(), ops.convert_to_numpy(dense.kernel).std(), rtol=0.03)


@pytest.mark.parametrize("initializer_fan", ["3d", "matrix"])
def test_initializer_fan_round_trips_through_the_layers(initializer_fan):
    x = np.random.default_rng(4).normal(size=(2, 3, 8)).astype("float32")
    projection = HeadProjection(num_heads=2, depth=4, initializer_fan=initializer_fan)
    assert_config_round_trip(projection, x)
    attention = MultiHeadAttention(num_heads=2, d_k=4, d_v=2, initializer_fan=initializer_fan)
    assert_config_round_trip(attention, x, x)
    assert attention.get_config()["initializer_fan"] == initializer_fan
    args = dict(num_heads=2, d_k=4, d_v=4, d_ff=16, residual_dropout=0.1)
    encoder = EncoderLayer(**args, initializer_fan=initializer_fan)
    decoder = DecoderLayer(**args, initializer_fan=initializer_fan)
    assert_config_round_trip(encoder, x)
    assert_config_round_trip(decoder, x, x)
    for layer in (encoder, decoder):
        assert layer.get_config()["initializer_fan"] == initializer_fan
    for attention in (encoder.self_attention, decoder.self_attention, decoder.cross_attention):
        assert attention.query_dense.initializer_fan == initializer_fan


def test_unknown_initializer_fan_is_refused():
    with pytest.raises(ValueError, match="initializer_fan"):
        HeadProjection(num_heads=2, depth=4, initializer_fan="2d")


def test_qkv_initializer_fan_config_option_reaches_the_model():
    config = TransformerConfig.preset("tiny").with_overrides(["qkv_initializer_fan=matrix"])
    assert config.qkv_initializer_fan == "matrix"
    assert TransformerConfig.from_json(config.to_json()) == config
    saved = TransformerConfig.preset("tiny").to_dict()
    del saved["qkv_initializer_fan"]  # a run's config.json from before the option
    assert TransformerConfig.from_dict(saved).qkv_initializer_fan == "3d"
    model = Transformer(config)
    heads, d_k = config.num_heads, config.d_k
    for layer in (*model.encoder_layers, *model.decoder_layers):
        assert layer.initializer_fan == "matrix"
    kernel = ops.convert_to_numpy(model.encoder_layers[0].self_attention.query_dense.kernel)
    assert np.abs(kernel).max() <= np.sqrt(6 / (config.d_model + heads * d_k)) * (1 + 1e-6)
    assert np.abs(kernel).max() > np.sqrt(6 / ((heads + d_k) * config.d_model))
    assert Transformer.from_config(model.get_config()).config.qkv_initializer_fan == "matrix"


@pytest.mark.parametrize("override", ["qkv_initializer_fan=2d", "qkv_initializer_fan=3"])
def test_unknown_qkv_initializer_fan_names_the_field(override):
    with pytest.raises(ConfigError, match="qkv_initializer_fan"):
        TransformerConfig.preset("tiny").with_overrides([override])


def test_multi_head_attention_separate_key_and_value_widths():
    layer = MultiHeadAttention(num_heads=8, d_k=16, d_v=64)  # Table 3 row (B)
    layer(np.zeros((1, 2, 512), "float32"), np.zeros((1, 3, 512), "float32"))
    shapes = {w.path.split("/")[-2]: tuple(w.shape) for w in layer.weights if "kernel" in w.path}
    assert shapes == {
        "query": (512, 8, 16),
        "key": (512, 8, 16),
        "value": (512, 8, 64),
        "output": (8, 64, 512),
    }


def test_multi_head_attention_config_round_trip():
    x = np.random.default_rng(3).normal(size=(2, 3, 8)).astype("float32")
    assert_config_round_trip(MultiHeadAttention(num_heads=2, d_k=4, d_v=2), x, x)


def test_attention_dropout_only_in_training():
    layer = MultiHeadAttention(num_heads=1, d_k=4, d_v=4, attention_dropout=0.5)
    x = np.ones((1, 8, 4), "float32")
    a, b = layer(x, x, training=False), layer(x, x, training=False)
    np.testing.assert_array_equal(ops.convert_to_numpy(a), ops.convert_to_numpy(b))
    assert not np.allclose(
        ops.convert_to_numpy(layer(x, x, training=True)), ops.convert_to_numpy(a)
    )
    assert keras.ops.convert_to_numpy(a).shape == (1, 8, 4)
