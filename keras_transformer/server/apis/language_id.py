"""Language codes, names and identification for the LibreTranslate API.

- Codes: an export records its languages as its run did ("en", or "eng" for some imported
  models); LibreTranslate names them by ISO 639-1 where there is one, and names Chinese
  "zh-Hans" / "zh-Hant" and Brazilian Portuguese "pt-BR" (its `language.model2iso`).
  `public_code` maps the first to the second, through the IETF tags of `langcodes`; requests
  may also use LibreTranslate's short aliases ("zh", "zt", "pb").
- Names: English names from `langcodes` and its `language-data` (offline; the `libretranslate`
  extra).
- Identification: `py3langid` (langid.py's model, shipped inside its package; the `detect`
  extra), imported when first asked, its probabilities renormalized over the languages the
  loaded models translate from, as LibreTranslate restricts its detector to its languages.

Example:
>>> public_code("eng"), public_code("zh"), public_code("pt-br")
('en', 'zh-Hans', 'pt-BR')
>>> language_name("de")
'German'
"""

import functools
import threading

from keras_transformer.errors import KerasTransformerError

# LibreTranslate's public codes of its models' "zh", "zt" and "pb" (its language.aliases).
ALIASES = {"zh": "zh-Hans", "zt": "zh-Hant", "pb": "pt-BR"}


class DetectorMissing(KerasTransformerError):
    """Language identification was asked for, and its package is not installed."""


def _langcodes():
    try:
        import langcodes
    except ModuleNotFoundError as error:
        raise ModuleNotFoundError(
            f"the LibreTranslate API needs the serving extra ({error}): "
            "pip install 'keras-transformer[serving]'"
        ) from None
    return langcodes


@functools.lru_cache(maxsize=1024)  # codes come from requests: bounded
def public_code(code: str) -> str:
    """`code` as LibreTranslate's API writes it (ISO 639-1 where there is one)."""
    if code.lower() in ALIASES:
        return ALIASES[code.lower()]
    tag = _langcodes().standardize_tag(code, macro=True)
    if tag in ("zh-TW", "zh-HK"):
        return "zh-Hant"
    return ALIASES.get(tag, tag)


@functools.lru_cache(maxsize=1024)
def language_name(code: str) -> str:
    """The English name of language `code`."""
    return _langcodes().Language.get(code).display_name()


class LanguageIdentifier:
    """py3langid's identifier, loaded once, at the first `rank` (its model takes a second)."""

    def __init__(self):
        self._identifier = None
        self._lock = threading.Lock()

    def _loaded(self):
        with self._lock:
            if self._identifier is None:
                try:
                    from py3langid.langid import MODEL_FILE, LanguageIdentifier
                except ModuleNotFoundError:
                    raise DetectorMissing(
                        "language detection needs py3langid, the detect extra: "
                        "pip install 'keras-transformer[detect]'"
                    ) from None
                self._identifier = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
            return self._identifier

    def rank(self, text: str, languages) -> list[dict]:
        """`[{"confidence", "language"}]`: the public codes of `languages` that the identifier
        knows, most likely first, with their probabilities (percent) renormalized over them."""
        identifier = self._loaded()
        known = {_identifier_label(code): code for code in languages}
        scores = [(known[label], p) for label, p in identifier.rank(text) if label in known]
        total = sum(p for _, p in scores)
        return [
            {"confidence": float(round(100 * p / total)) if total else 0.0, "language": code}
            for code, p in scores
        ]


def _identifier_label(code: str) -> str:
    """py3langid's label of a public code: its language subtag ("zh" for "zh-Hans")."""
    return code.split("-")[0].lower()
