"""Texts and documents as the translator sees them: paragraphs of runs, split into sentences and
put back, each sentence's translation in the runs its source words were in.

- `sentences`: a text's sentences and the spacing between them;
- `runs`: paragraphs held in runs, their sentences listed and the translations spread back over
  the runs by word alignment (`Layout`, `spread`);
- `html_text`: HTML as paragraphs between block tags, runs between inline tags;
- `document`: what every format gives (`Document`), and a document's translation;
- `formats`: .txt, .html, .docx, .odt, .odp, .pptx, .epub, .srt, one module each;
- `checks`: a file's format and safety, checked before its library opens it;
- `downloads`: translated files kept under unguessable names until they expire;
- `settings`: `DocumentSettings`, the limits of `/translate_file`.

It knows nothing of models or HTTP: the APIs (`apis.libretranslate`) give it a translator.
LibreTranslate's own file translator, argos-translate-files, is not used: it brings
argostranslate's model stack (CTranslate2 and its models' runtime, a `sacremoses` that
conflicts with this project's), PyMuPDF, an exact old BeautifulSoup, translates through
argostranslate rather than a served model, and unpacks zip members without a size check
(docs/DOCUMENTS.md#why-not-argos-translate-files).
"""
