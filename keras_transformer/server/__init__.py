"""The server of exported models, in layers, each importing only those below it:

- `server`: `ModelServer`, the ASGI application and gRPC server, their start and drain;
- `apis`: TF Serving's REST (`rest`) and gRPC (`grpc_service`) APIs and LibreTranslate's
  (`libretranslate`, with `file_translation`, `alignment`, `api_keys`, `language_id`), what the
  HTTP ones share (`http`), and their OpenAPI contract (`openapi`);
- `page`: the web page at `/` (`web_page`) and the contract's at `/docs` (`api_docs`);
- `documents`: texts, HTML and document files (`formats`) as paragraphs of runs, split into
  sentences and put back, aligned (`sentences`, `runs`, `html_text`, `document`), hostile
  files refused (`checks`), translations kept for download (`downloads`);
- `models`: the models served, by name (`model_config`, `model_manager`), their versions
  (`lifecycle`, `servable`), the batching queue (`batching`), request `limits` and `metrics`;
- `errors`: `ServingError`, a refusal with its HTTP status and gRPC code, for every API.
"""
