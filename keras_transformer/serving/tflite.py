"""TFLite (LiteRT) export: the model and its beam search (§6.1) as one builtin-ops-only model.

`export_tflite` writes a model of builtin ops only (the LiteRT interpreters
cannot run `SELECT_TF_OPS`), so tokenization stays with the caller: one signature `translate`,
`source_ids [1, source_length]` int32 (PAD = 0, EOS-terminated) → `target_ids [1, L]` int32 and
`scores [1]`, with L = min(source_length + extra_length, max_length). Batch, lengths, beam size,
α and the decoding cache are fixed at export, so every shape in the `WHILE` loop is static.
Variables are frozen into constants first: LiteRT cannot read resource variables from inside a
`WHILE` body. `quantize` (`export.TFLITE_QUANTIZATIONS`) stores the weights smaller:

- `"dynamic"`: int8 (dynamic-range quantization: a scale per weight tensor, activations quantized
  on the fly for the matrix products), about a quarter of the float32 size;
- `"float16"`: float16 (TFLite's `target_spec.supported_types`), turned back into float32 when
  the model loads: about half the size, the arithmetic float32's, the weights rounded to float16.

Example (needs a trained run, so not run as a doctest)::

    export_tflite(load_run("runs/m30k-ende"), "saved_models/m30k-ende.tflite")
"""

import logging
import tempfile
from pathlib import Path

import tensorflow as tf

from durable_files import write_atomically
from keras_transformer import keras_internals
from keras_transformer.decoding.search import best_hypotheses
from keras_transformer.search_settings import SearchSettings
from keras_transformer.serving.export import TFLITE_QUANTIZATIONS

logger = logging.getLogger(__name__)

# The longest source a TFLite model takes, in subwords with EOS: room for Multi30k's sentences.
TFLITE_SOURCE_LENGTH = 64


def tflite_search_function(model, source_length, search=SearchSettings(), constraint=None):
    """The decoding `tf.function` for TFLite: fixed batch 1, lengths and `search` (a
    `SearchSettings`); greedy if its beam size is 1."""
    spec = tf.TensorSpec([1, source_length], tf.int32, name="source_ids")

    @tf.function(input_signature=[spec])
    def translate(source_ids):
        target_ids, scores = best_hypotheses(
            model, source_ids, search.beam_size, search.alpha, search.extra_length, constraint
        )
        return {"target_ids": target_ids, "scores": scores}

    return translate


def export_tflite(
    translator,
    path,
    quantize=None,
    source_length=None,
    search=SearchSettings(),
) -> Path:
    """Writes a builtin-ops-only LiteRT model (see the module docstring); returns its path.

    `quantize`: one of `TFLITE_QUANTIZATIONS`, or `None` for float32 weights.

    `search`: the `SearchSettings` fixed in the model (§6.1's by default).

    `source_length`: the fixed source width in subwords with EOS; default
    `TFLITE_SOURCE_LENGTH`, or the model's `max_length` if that is shorter.
    """
    if quantize not in (None, *TFLITE_QUANTIZATIONS):
        raise ValueError(f"quantize {quantize!r} must be None or one of {TFLITE_QUANTIZATIONS}")
    max_source = translator.model.config.max_length
    source_length = source_length or min(TFLITE_SOURCE_LENGTH, max_source)
    if not 1 < source_length <= max_source:
        raise ValueError(f"source_length {source_length} must be in 2..{max_source} (max_length)")
    search = tflite_search_function(
        translator.model, source_length, search, translator.constraint
    ).get_concrete_function()
    frozen = keras_internals.frozen_function(search)
    # A variable-free module around the frozen graph keeps the signature's names in TFLite.
    module = tf.Module()
    module.translate = tf.function(
        lambda source_ids: tf.nest.pack_sequence_as(search.structured_outputs, frozen(source_ids)),
        input_signature=search.structured_input_signature[0],
    )
    with tempfile.TemporaryDirectory() as scratch:
        tf.saved_model.save(module, scratch, signatures={"translate": module.translate})
        converter = tf.lite.TFLiteConverter.from_saved_model(scratch, signature_keys=["translate"])
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
        if quantize:
            converter.optimizations = [tf.lite.Optimize.DEFAULT]
        if quantize == "float16":
            converter.target_spec.supported_types = [tf.float16]
        flatbuffer = converter.convert()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, lambda partial: partial.write_bytes(flatbuffer))
    logger.info("wrote %s (%.1f MiB)", path, len(flatbuffer) / 2**20)
    return path
