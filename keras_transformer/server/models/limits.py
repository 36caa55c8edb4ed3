"""What one request may ask of the server: sentences, source length, token ids.

Checked on a request's declared shape before any array is built from it (a gRPC `TensorProto`
declares its shape apart from its values, and `tf.make_ndarray` would allocate the declared
shape; a REST request's lists declare theirs by their lengths, `declared_shape`), then on the
values. Each refusal names the limit and the `serve` flag that sets it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from keras_transformer.errors import ConfigError
from keras_transformer.server.errors import bad_request

if TYPE_CHECKING:  # the server's flags are made from `Limits` without loading TensorFlow
    import numpy as np
    import tensorflow as tf


def declared_shape(value, rank: int) -> list[int]:
    """The shape that a JSON value (nested lists) declares, read from the lengths of its lists
    without building an array: each dimension is the longest list at that depth. A level that
    is not all lists ends the shape there, so a value of another rank shows in its length."""
    shape, level = [], [value]
    for depth in range(rank):
        if not all(isinstance(item, list | tuple) for item in level):
            break
        shape.append(max((len(item) for item in level), default=0))
        if depth + 1 < rank:
            level = [element for item in level for element in item]
    return shape


@dataclass(frozen=True)
class Limits:
    """What one request may hold; the `help` of each field documents it, and
    `keras-transformer serve`'s flags are generated from them."""

    max_sentences_per_request: int = field(
        default=64,
        metadata={"help": "sentences of one request", "metavar": "MAX_SENTENCES"},
    )
    max_source_length: int = field(
        default=2048, metadata={"help": "UTF-8 bytes of a sentence, or ids of a source_ids row"}
    )

    def __post_init__(self):
        for name in ("max_sentences_per_request", "max_source_length"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} {getattr(self, name)} is below 1")

    def check_shape(self, name, shape, spec: tf.TensorSpec):
        """A declared `shape` (list of ints) for input `name` against its signature's `spec` and
        the limits, before anything of that size exists."""
        if len(shape) != spec.shape.rank or any(size < 0 for size in shape):
            raise bad_request(
                f"input {name!r} has shape {list(shape)}, expected {spec.shape.as_list()}"
            )
        if shape and shape[0] > self.max_sentences_per_request:
            raise bad_request(
                f"input {name!r} holds {shape[0]} sentences, over the limit of "
                f"{self.max_sentences_per_request} (max_sentences_per_request)"
            )
        if len(shape) > 1 and shape[1] > self.max_source_length:
            raise bad_request(
                f"input {name!r} has rows of {shape[1]} ids, over the limit of "
                f"{self.max_source_length} (max_source_length)"
            )
        if not spec.shape.is_compatible_with(shape):
            raise bad_request(
                f"input {name!r} has shape {list(shape)}, expected {spec.shape.as_list()}"
            )

    def check_values(self, name, array: np.ndarray, spec: tf.TensorSpec):
        """The values of input `name`: sentence lengths; integers within their dtype (a larger value
        would wrap), token ids (`*_ids`) not negative; no number with a decimal point for an
        integer input (a cast would truncate it; TensorFlow Serving's JSON reader refuses 2.0
        too)."""
        if spec.dtype.is_integer and array.dtype.kind == "f" and array.size:
            raise bad_request(
                f"input {name!r} holds {array.reshape(-1)[0]}: {spec.dtype.name} values of "
                f"{name} are integers"
            )
        if spec.dtype.name == "string" and array.dtype.kind in "USO":
            texts = (v for v in array.reshape(-1) if isinstance(v, str | bytes))
            for index, value in enumerate(texts):
                size = len(value.encode("utf-8") if isinstance(value, str) else value)
                if size > self.max_source_length:
                    raise bad_request(
                        f"input {name!r} sentence {index} has {size} bytes, over the limit of "
                        f"{self.max_source_length} (max_source_length)"
                    )
        elif spec.dtype.is_integer and array.size and array.dtype.kind in "iuO":
            low = 0 if name.endswith("_ids") else spec.dtype.min
            values = (int(array.min()), int(array.max()))
            for value in values:
                if not low <= value <= spec.dtype.max:
                    raise bad_request(
                        f"input {name!r} holds {value}: {spec.dtype.name} values of {name} are "
                        f"{low} to {spec.dtype.max}"
                    )
