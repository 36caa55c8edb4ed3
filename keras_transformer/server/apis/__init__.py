"""The APIs of the server: TensorFlow Serving's REST and gRPC, and LibreTranslate's."""
