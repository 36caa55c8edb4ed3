"""The document formats `/translate_file` translates, by extension: one module each, with its
`EXTENSIONS`, `MEDIA_TYPE` and `read(data, settings) -> document.Document`, which checks the
file (`checks`) before its library opens it."""

from keras_transformer.server.documents.formats import docx, epub, html, odt, pptx, srt, txt

MODULES = (txt, html, docx, odt, pptx, epub, srt)
BY_EXTENSION = {extension: module for module in MODULES for extension in module.EXTENSIONS}
EXTENSIONS = [module.EXTENSIONS[0] for module in MODULES]
