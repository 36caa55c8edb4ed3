"""What one request may ask of the server: sentences, source length, token ids.

Checked on a request's declared shape before any array is built from it (a gRPC `TensorProto`
declares its shape apart from its values, and `tf.make_ndarray` would allocate the declared
shape; a REST request's lists declare theirs by their lengths, `declared_shape`), then on the
values. Each refusal names the limit and the `serve` flag that sets it.
"""

from dataclasses import dataclass

import numpy as np
import tensorflow as tf

from keras_transformer.serving.errors import bad_request


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
    """`max_sentences`: rows of a request; `max_source_length`: UTF-8 bytes of a sentence, or
    ids of a `source_ids` row."""

    max_sentences: int = 64
    max_source_length: int = 2048

    def check_shape(self, name, shape, spec: tf.TensorSpec):
        """A declared `shape` (list of ints) for input `name` against its signature's `spec` and
        the limits, before anything of that size exists."""
        if len(shape) != spec.shape.rank or any(size < 0 for size in shape):
            raise bad_request(
                f"input {name!r} has shape {list(shape)}, expected {spec.shape.as_list()}"
            )
        if shape and shape[0] > self.max_sentences:
            raise bad_request(
                f"input {name!r} holds {shape[0]} sentences, over the limit of "
                f"{self.max_sentences} (--max-sentences-per-request)"
            )
        if len(shape) > 1 and shape[1] > self.max_source_length:
            raise bad_request(
                f"input {name!r} has rows of {shape[1]} ids, over the limit of "
                f"{self.max_source_length} (--max-source-length)"
            )
        if not spec.shape.is_compatible_with(shape):
            raise bad_request(
                f"input {name!r} has shape {list(shape)}, expected {spec.shape.as_list()}"
            )

    def check_values(self, name, array: np.ndarray, spec: tf.TensorSpec):
        """The values of input `name`: sentence lengths; integers within their dtype (a larger value
        would wrap), token ids (`*_ids`) not negative."""
        if spec.dtype == tf.string and array.dtype.kind in "USO":
            texts = (v for v in array.reshape(-1) if isinstance(v, str | bytes))
            for index, value in enumerate(texts):
                size = len(value.encode("utf-8") if isinstance(value, str) else value)
                if size > self.max_source_length:
                    raise bad_request(
                        f"input {name!r} sentence {index} has {size} bytes, over the limit of "
                        f"{self.max_source_length} (--max-source-length)"
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
