"""A trained model as files that servers read: one job, apart from the server that reads them.

- `exporter`: `ExportOptions` and `export`, one export in one of three formats;
- `saved_model`: a SavedModel in TensorFlow Serving's layout, with beam-search signatures;
- `tflite`: a LiteRT (TFLite) model of builtin ops;
- `ctranslate2_export`: a CTranslate2 model directory;
- `layout`: the version directory's extra files (warm-up requests, model info) and TFLite's
  weight types, which the server reads without importing an exporter.
"""
