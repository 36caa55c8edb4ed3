"""Serving a trained model: export and the server.

- `saved_model`: a SavedModel in TensorFlow Serving's layout, with beam-search signatures.
- `tflite`: a LiteRT (TFLite) model of builtin ops.
- `server`: a TF-Serving-compatible REST and gRPC endpoint over an export base path, with
  `rest`, `grpc_service`, `lifecycle`, `batching`, `limits`, `metrics` and `errors`.
- `libretranslate`: LibreTranslate's API on the server's REST port, with `sentences`,
  `html_text`, `api_keys` and `language_id`.
- `web_page`: the web page at `/` on the REST port (its files in `web/`).
"""
