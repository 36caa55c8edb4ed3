"""The files of an export that servers read: TensorFlow Serving's layout of a version directory,
written by `saved_model` and `tflite` and read by the server's `servable`, the TFLite export's
files, and its weight types, offered by `exporter.ExportOptions` (which imports no TensorFlow)
and made by `tflite`."""

from pathlib import Path

# Where TensorFlow Serving looks for requests to run once at load, before it serves a version.
WARMUP_REQUESTS = Path("assets.extra") / "tf_serving_warmup_requests"

# What a version translates, for a server to list: JSON with `source_language` and
# `target_language` (codes as the run's run.json records them, or null), `target_language_tokens`
# (a multi-target Marian model's `{code: ">>code<<"}`, else {}) and `max_length` (the longest
# source, EOS included, before the signatures cut it). TensorFlow Serving ignores the file.
MODEL_INFO = Path("assets.extra") / "model_info.json"

# How a TFLite model stores its weights (export/tflite.py): int8 with dynamic-range
# quantization, or float16.
TFLITE_QUANTIZATIONS = ("dynamic", "float16")

# A TFLite export in a version directory: the model under the name TensorFlow Serving's
# `--prefer_tflite_model` reads, its tokenizer files in `tflite_tokenizer_directory` beside it.
TFLITE_MODEL = "model.tflite"

# How a caller tokenizes for a TFLite model and reads its output, written beside it: the files,
# the special ids, the fixed source length, the search fixed in the model, and the recipe.
TFLITE_TOKENIZER_NOTE = "tokenizer.json"


def tflite_tokenizer_directory(path) -> Path:
    """Where the tokenizer of the TFLite model `path` lies: `<name>.tokenizer/` beside it."""
    path = Path(path)
    return path.with_name(f"{path.stem}.tokenizer")
