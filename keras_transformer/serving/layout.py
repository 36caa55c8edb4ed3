"""TensorFlow Serving's layout of a version directory, shared by the exporter that writes it
(`saved_model`) and the server that reads it (`servable`), so that neither imports the other."""

from pathlib import Path

# Where TensorFlow Serving looks for requests to run once at load, before it serves a version.
WARMUP_REQUESTS = Path("assets.extra") / "tf_serving_warmup_requests"
