"""A REST request's limits are checked on the shape its lists declare, before numpy builds an
array of that size, as the gRPC path checks a `TensorProto`'s declared shape."""

import types

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.server.errors import ServingError
from keras_transformer.server.models import servable as servable_module
from keras_transformer.server.models.limits import Limits, declared_shape
from keras_transformer.server.models.servable import Servable, graph_error_message

LIMITS = Limits(max_sentences_per_request=8, max_source_length=200)


def test_the_declared_shape_is_the_longest_list_at_each_depth():
    assert declared_shape(["a", "b", "c"], 1) == [3]
    assert declared_shape([[1], [1, 2, 3], []], 2) == [3, 3]
    assert declared_shape([], 2) == [0, 0]
    assert declared_shape(0.6, 0) == []
    assert declared_shape("a", 1) == []  # not a list: a rank the spec does not have
    assert declared_shape([1, 2], 2) == [2]


@pytest.fixture
def servable(tmp_path, monkeypatch):
    """A version whose signatures take texts and id rows; numpy must build nothing."""

    def signature(spec):
        return tf.function(lambda **inputs: inputs).get_concrete_function(**spec)

    version = Servable("toy", 1, tmp_path)
    version.signatures = {
        "serving_default": signature({"text": tf.TensorSpec([None], tf.string)}),
        "ids": signature({"source_ids": tf.TensorSpec([None, None], tf.int32)}),
    }

    def built_before_the_limits(value, *args, **kwargs):
        raise AssertionError("an array was built before the limits were checked")

    trap = types.SimpleNamespace(asarray=built_before_the_limits)
    monkeypatch.setattr(servable_module, "np", trap)
    return version


@pytest.mark.parametrize(
    "signature, inputs, message",
    [
        ("serving_default", {"text": ["a"] * 9}, "holds 9 sentences, over the limit of 8"),
        ("serving_default", {"text": ["a"] * 10**6}, "holds 1000000 sentences"),
        ("ids", {"source_ids": [[2], [2] * 201]}, "rows of 201 ids, over the limit of 200"),
        ("ids", {"source_ids": [2, 3]}, "has shape [2], expected [None, None]"),
    ],
)
def test_an_oversized_request_is_refused_before_numpy_builds_it(
    servable, signature, inputs, message
):
    with pytest.raises(ServingError, match=message.replace("[", r"\[").replace("]", r"\]")):
        servable.arrays(signature, inputs, LIMITS)


def test_a_request_within_the_limits_is_built(servable, monkeypatch):
    monkeypatch.setattr(servable_module, "np", np)
    arrays = servable.arrays("ids", {"source_ids": [[5, 6], [7, 8]]}, LIMITS)
    np.testing.assert_array_equal(arrays["source_ids"], [[5, 6], [7, 8]])


@pytest.mark.parametrize("value", [2.5, 2.0, [1, 2.5], float("nan")])
def test_a_number_with_a_decimal_point_is_no_integer(value):
    """A cast would truncate 2.5 into 2; TensorFlow Serving's JSON reader refuses 2.0 too."""
    with pytest.raises(ServingError, match="values of beam_size are integers"):
        LIMITS.check_values("beam_size", np.asarray(value), tf.TensorSpec(None, tf.int32))
    LIMITS.check_values("alpha", np.asarray(value), tf.TensorSpec(None, tf.float32))


@tf.function(input_signature=[tf.TensorSpec([None], tf.int32)])
def first_of_few(ids):
    size = tf.size(ids)
    check = tf.debugging.Assert(size < 3, [tf.strings.format("ids {} are too many", size)])
    with tf.control_dependencies([check]):
        return ids[0]


@pytest.mark.parametrize(
    "ids, words",
    [([1, 2, 3], "ids 3 are too many"), ([], "slice index 0 of dimension 0 out of bounds.")],
)
def test_a_graph_error_is_answered_in_its_own_words(ids, words):
    """An Assert's message, or the op's, without TensorFlow's header, stack and node names."""
    with pytest.raises(tf.errors.InvalidArgumentError) as raised:
        first_of_few(tf.constant(ids, tf.int32))
    assert graph_error_message(raised.value.message) == words
