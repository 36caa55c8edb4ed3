"""TFLite (LiteRT) export: the model and its beam search (§6.1) as one builtin-ops-only model.

`export_tflite` writes a model of builtin ops only (the LiteRT interpreters
cannot run `SELECT_TF_OPS`), so tokenization stays with the caller: one signature `translate`,
`source_ids [batch, source_length]` int32 (PAD = 0, EOS-terminated) → `target_ids [batch, L]`
int32 and `scores [batch]`, with L = min(source_length + extra_length, max_length). Batch (1 by
default), lengths, beam size, α and the decoding cache are fixed at export, so every shape in the
`WHILE` loop is static; a caller with fewer sentences than the batch fills it with copies of one
of them, which end when it ends. A batch of 16 or more keeps XNNPACK's int8 kernels busier than
one sentence at a time does, at the cost of a decoding cache that many times larger. The
beam search runs in one `WHILE` loop over the whole cache (`search.beam_decode`'s
`cache_blocks=False`), not a loop per cache block as in TensorFlow: LiteRT's XNNPACK delegate
packs the weights of every loop anew, and each loop carries its own float32 copy of the tied
embedding matrix, so that a loop per block multiplied the memory an interpreter holds
(docs/PRETRAINED_PERFORMANCE.md).
Variables are frozen into constants first: LiteRT cannot read resource variables from inside a
`WHILE` body. `quantize` (`layout.TFLITE_QUANTIZATIONS`) stores the weights smaller:

- `"dynamic"`: int8 (dynamic-range quantization: a scale per weight tensor, activations quantized
  on the fly for the matrix products), about a quarter of the float32 size. The embeddings are
  looked up in an int8 copy of their table too (a scale per row, `int8_lookups`): TFLite's
  converter would otherwise keep a float32 copy of the table for the lookups, and pass it into
  the search's loop, where it took more memory than the rest of the model;
- `"float16"`: float16 (TFLite's `target_spec.supported_types`), turned back into float32 when
  the model loads: about half the size, the arithmetic float32's, the weights rounded to float16.

Beside the model, `<name>.tokenizer/` holds what a caller tokenizes with
(`layout.TFLITE_TOKENIZER_NOTE`):
the subword model, or an imported Marian model's `source.spm`, `target.spm` and the piece ↔ id
table `vocabulary.txt`, and `tokenizer.json` saying how to use them.

Example (needs a trained run, so not run as a doctest)::

    export_tflite(load_run("runs/m30k-ende"), "saved_models/m30k-ende.tflite")
    # saved_models/m30k-ende.tflite, saved_models/m30k-ende.tokenizer/
    export_tflite(load_run("runs/m30k-ende"), "saved_models/m30k-ende-int8", "dynamic")
    # saved_models/m30k-ende-int8/1/model.tflite, .../1/model.tokenizer/, a server's version
"""

import contextlib
import dataclasses
import functools
import json
import logging
import math
import tempfile
from pathlib import Path

import numpy as np
import tensorflow as tf

from durable_files import copy_atomically, write_atomically
from keras_transformer import keras_internals
from keras_transformer.decoding.search import best_hypotheses
from keras_transformer.export.layout import (
    TFLITE_MODEL,
    TFLITE_QUANTIZATIONS,
    TFLITE_TOKENIZER_NOTE,
    tflite_tokenizer_directory,
)
from keras_transformer.export.versions import model_info, write_model_info, write_next_version
from keras_transformer.layers.embeddings import SharedEmbedding
from keras_transformer.search_settings import SearchSettings
from pipelines.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID

logger = logging.getLogger(__name__)

MARIAN_RECIPE = {
    "encode": (
        "segment the text with source_model (as pieces); look each piece up in vocabulary "
        "(line n is id n; a missing piece is unk_id); a multilingual model's target-language "
        "token (>>fra<<), first in the text, is looked up whole; append eos_id; pad with "
        "pad_id to source_length"
    ),
    "decode": (
        "drop the ids from the first eos_id on, and pad_id and bos_id; map each id to its "
        "piece in vocabulary, each piece to its id in target_model (its unk id where it lacks "
        "the piece) and decode those ids with target_model"
    ),
}
SUBWORD_RECIPE = {
    "encode": (
        "the subword model's own ids of the text; append eos_id; pad with pad_id to source_length"
    ),
    "decode": "drop the ids from the first eos_id on, and pad_id and bos_id; decode the rest "
    "with the subword model",
}

# The longest source a TFLite model takes, in subwords with EOS: room for Multi30k's sentences.
TFLITE_SOURCE_LENGTH = 64


def tflite_search_function(
    model, source_length, search=SearchSettings(), constraint=None, batch_size=1
):
    """The decoding `tf.function` for TFLite: fixed batch, lengths and `search` (a
    `SearchSettings`); greedy if its beam size is 1."""
    spec = tf.TensorSpec([batch_size, source_length], tf.int32, name="source_ids")

    @tf.function(input_signature=[spec])
    def translate(source_ids):
        target_ids, scores = best_hypotheses(
            model,
            source_ids,
            search.beam_size,
            search.alpha,
            search.extra_length,
            constraint,
            search.min_length,
            search.penalty,
            cache_blocks=False,
        )
        return {"target_ids": target_ids, "scores": scores}

    return translate


def export_tflite(
    translator,
    path,
    quantize=None,
    source_length=None,
    search=None,
    languages=(None, None),
    batch_size=1,
) -> Path:
    """Writes a builtin-ops-only LiteRT model (see the module docstring); returns its path.

    `path`: a `.tflite` file, or else a base path whose next version directory
    (`versions.write_next_version`) gets the model as `layout.TFLITE_MODEL`, its tokenizer
    beside it and `layout.MODEL_INFO` naming `languages`, the (source, target) codes, as a
    server loads it.

    `quantize`: one of `TFLITE_QUANTIZATIONS`, or `None` for float32 weights.

    `search`: the `SearchSettings` fixed in the model (default: the translator's, §6.1's or
    an imported run's own).

    `source_length`: the fixed source width in subwords with EOS; default
    `TFLITE_SOURCE_LENGTH`, or the model's `max_length` if that is shorter.

    `batch_size`: the sentences one call decodes, fixed (see the module docstring).
    """
    if quantize not in (None, *TFLITE_QUANTIZATIONS):
        raise ValueError(f"quantize {quantize!r} must be None or one of {TFLITE_QUANTIZATIONS}")
    max_source = translator.model.config.max_length
    source_length = source_length or min(TFLITE_SOURCE_LENGTH, max_source)
    if not 1 < source_length <= max_source:
        raise ValueError(f"source_length {source_length} must be in 2..{max_source} (max_length)")
    if batch_size < 1:
        raise ValueError(f"batch_size {batch_size} must be >= 1")
    search = search or translator.search
    lookups = int8_lookups(translator.model) if quantize == "dynamic" else contextlib.nullcontext()
    with _without_notes(TENSORFLOW_NOTES), lookups:
        flatbuffer = _convert(translator, source_length, search, quantize, batch_size)
    path = Path(path)
    if path.suffix != ".tflite":

        def write(staging):
            _write_model(staging / TFLITE_MODEL, flatbuffer, translator, source_length, search)
            write_model_info(staging, model_info(translator, languages, search, source_length))

        return write_next_version(path, write)
    path.parent.mkdir(parents=True, exist_ok=True)
    _write_model(path, flatbuffer, translator, source_length, search)
    return path


@contextlib.contextmanager
def int8_lookups(model):
    """Meanwhile, each `SharedEmbedding` of `model` looks tokens up in an int8 copy of its
    table, a scale per row (abs-max / 127), as constants of the graph that traces it: in the
    search's loop, its own. The logits still read the float32 table, which the converter
    quantizes as the other weights."""
    embeddings = [
        layer for layer in keras_internals.sublayers(model) if isinstance(layer, SharedEmbedding)
    ]
    for layer in embeddings:
        table = layer.embeddings.numpy()
        scales = np.maximum(np.abs(table).max(axis=1), np.finfo(np.float32).tiny) / 127
        quantized = np.round(table / scales[:, None]).astype(np.int8)
        layer.call = functools.partial(_int8_lookup, quantized, scales, math.sqrt(layer.d_model))
    try:
        yield
    finally:
        for layer in embeddings:
            del layer.call


def _int8_lookup(quantized, scales, multiplier, token_ids):
    ids = tf.cast(token_ids, tf.int32)
    rows = tf.cast(tf.gather(tf.constant(quantized), ids), tf.float32)
    return rows * (tf.gather(tf.constant(scales), ids) * multiplier)[..., None]


def _write_model(path, flatbuffer, translator, source_length, search):
    directory = tflite_tokenizer_directory(path)
    write_tokenizer_files(translator.tokenizer, directory, source_length, search)
    write_atomically(path, lambda partial: partial.write_bytes(flatbuffer))
    logger.info("wrote %s (%.1f MiB)", path, len(flatbuffer) / 2**20)


def _convert(translator, source_length, search, quantize, batch_size) -> bytes:
    """The TFLite flatbuffer of `translator`'s search (see `export_tflite`)."""
    search = tflite_search_function(
        translator.model, source_length, search, translator.constraint, batch_size
    ).get_concrete_function()
    frozen = keras_internals.frozen_function(search)
    # A variable-free module around the frozen graph keeps the signature's names in TFLite.
    module = tf.Module()
    module.translate = tf.function(
        lambda source_ids: tf.nest.pack_sequence_as(search.structured_outputs, frozen(source_ids)),
        input_signature=search.structured_input_signature[0],
    )
    with tempfile.TemporaryDirectory() as scratch:
        # Without gradients: swish's custom gradient captures a constant of the frozen graph,
        # which a SavedModel cannot hold, and a TFLite model never differentiates.
        tf.saved_model.save(
            module,
            scratch,
            signatures={"translate": module.translate},
            options=tf.saved_model.SaveOptions(experimental_custom_gradients=False),
        )
        converter = tf.lite.TFLiteConverter.from_saved_model(scratch, signature_keys=["translate"])
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
        if quantize:
            converter.optimizations = [tf.lite.Optimize.DEFAULT]
        if quantize == "float16":
            converter.target_spec.supported_types = [tf.float16]
        return converter.convert()


def write_tokenizer_files(tokenizer, directory, source_length, search: SearchSettings):
    """Copies `tokenizer`'s files into `directory` with a `TFLITE_TOKENIZER_NOTE` naming them, the
    special ids, the fixed source length, the `search` fixed in the model and how to encode and
    decode."""
    if tokenizer.kind == "marian":
        files = {
            "source_model": tokenizer.source_asset,
            "target_model": tokenizer.target_asset,
            "vocabulary": tokenizer.vocabulary_asset,
        }
        note = {"target_languages": tokenizer.target_languages, **MARIAN_RECIPE}
    else:
        files = {"subword_model": tokenizer.asset}
        note = dict(SUBWORD_RECIPE)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    names = {role: _copy_asset(asset, directory) for role, asset in files.items()}
    note = {
        **names,
        "pad_id": PAD_ID,
        "bos_id": BOS_ID,
        "eos_id": EOS_ID,
        "unk_id": UNK_ID,
        "source_length": source_length,
        "search": dataclasses.asdict(search),
        **note,
    }
    text = json.dumps(note, indent=1, ensure_ascii=False) + "\n"
    note_path = directory / TFLITE_TOKENIZER_NOTE
    write_atomically(note_path, lambda partial: partial.write_text(text, "utf-8"))


def _copy_asset(asset, directory) -> str:
    """Copies a tokenizer's `tf.saved_model.Asset` into `directory`; returns its file name."""
    source = Path(asset.asset_path.numpy().decode())
    copy_atomically(source, directory / source.name)
    return source.name


# TensorFlow's notes on what the export does on purpose, kept out of the log: the custom
# gradients it saves without (`_convert`), and a lookup table of the tokenizer (made before, and
# not in the model) that freezing the graph does not serialize.
TENSORFLOW_NOTES = ("unsaved custom gradients", "Issue encountered when serializing table_init")


@contextlib.contextmanager
def _without_notes(notes):
    """absl's and TensorFlow's log records that hold one of `notes` are dropped meanwhile."""
    dropped = _WithoutMessage(notes)
    noisy = [logging.getLogger(name) for name in ("absl", "tensorflow")]
    for log in noisy:
        log.addFilter(dropped)
    try:
        yield
    finally:
        for log in noisy:
            log.removeFilter(dropped)


class _WithoutMessage(logging.Filter):
    """Drops the log records whose message holds one of `texts`."""

    def __init__(self, texts):
        super().__init__()
        self.texts = texts

    def filter(self, record):
        return not any(text in record.getMessage() for text in self.texts)
