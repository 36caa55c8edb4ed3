"""A shared check for every layer: config round trip and identical outputs after rebuilding."""

import keras
import numpy as np


def assert_config_round_trip(layer, *inputs, **call_kwargs):
    """Rebuilds `layer` from its config, copies its weights, and expects identical outputs."""
    expected = keras.ops.convert_to_numpy(layer(*inputs, **call_kwargs))
    config = layer.get_config()
    clone = layer.__class__.from_config(config)
    clone(*inputs, **call_kwargs)
    clone.set_weights(layer.get_weights())
    assert clone.get_config() == config
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(clone(*inputs, **call_kwargs)), expected, atol=1e-6
    )
    serialized = keras.saving.serialize_keras_object(layer)
    assert isinstance(keras.saving.deserialize_keras_object(serialized), layer.__class__)
