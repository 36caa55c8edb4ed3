"""The files of an export that servers read: TensorFlow Serving's layout of a version directory,
written by `saved_model` and read by the server's `servable`, and the TFLite export's weight
types, offered by `exporter.ExportOptions` (which imports no TensorFlow) and made by `tflite`."""

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
