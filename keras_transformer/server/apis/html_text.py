"""The text of an HTML fragment, as LibreTranslate's `format: html` translates it: the markup
(tags, comments, declarations) is kept as written and the text between tags is translated.

The markup is found by the shapes of HTML's tokens (WHATWG HTML §13.1: `<name ...>`,
`</name>`, `<!-- ... -->`, `<!...>`, `<?...>`), not by a parser that builds a tree, so
unbalanced or unclosed tags change nothing: a `<` that opens no tag (`a < b`) is text, and a tag
left open at the end is kept as markup. The text of
elements whose content is not prose (`RAW_TEXT`: `<script>`, `<style>`, `<code>`) is kept.
Each text node is unescaped (`&amp;` → `&`), split into `sentences.Piece`s, and its
translations escaped again when the pieces are joined (`join`).

Example:
>>> pieces = split("<p>A dog runs. <b>It barks!</b></p>")
>>> [piece.text for piece in pieces if piece.translate]
['A dog runs.', 'It barks!']
>>> join(pieces, ["Ein Hund rennt.", "Er bellt & springt!"])
'<p>Ein Hund rennt. <b>Er bellt &amp; springt!</b></p>'
"""

import html
import re
from collections.abc import Iterable

from keras_transformer.server.apis import sentences
from keras_transformer.server.apis.sentences import Piece

# A comment, a declaration or processing instruction, or a tag (whose quoted attribute values
# may hold ">"); one left open runs to the end of the text, as browsers read it (and so no text
# is scanned twice).
MARKUP = re.compile(
    r"<!--.*?(?:-->|\Z)|<[!?][^>]*(?:>|\Z)"
    r"|</?[A-Za-z](?:[^>\"']|\"[^\"]*(?:\"|\Z)|'[^']*(?:'|\Z))*(?:>|\Z)",
    re.DOTALL,
)
TAG_NAME = re.compile(r"<(/?)([A-Za-z][A-Za-z0-9-]*)")
RAW_TEXT = frozenset({"script", "style", "code"})


def split(fragment: str) -> list[Piece]:
    """The markup of `fragment` (kept) and the sentences of its text (unescaped), in order."""
    pieces, end, raw = [], 0, None  # raw: the element whose text is being kept
    for match in MARKUP.finditer(fragment):
        pieces += _text(fragment[end : match.start()], keep=raw is not None)
        pieces.append(Piece(match.group(), False))
        end = match.end()
        tag = TAG_NAME.match(match.group())
        if tag and tag[2].lower() in RAW_TEXT:
            closing, name = tag[1] == "/", tag[2].lower()
            if raw is None and not closing:
                raw = name
            elif closing and name == raw:
                raw = None
    return pieces + _text(fragment[end:], keep=raw is not None)


def _text(text: str, keep: bool) -> list[Piece]:
    if not text:
        return []
    if keep or not text.strip():
        return [Piece(text, False)]
    return sentences.split(html.unescape(text))


def join(pieces: Iterable[Piece], translations: Iterable[str]) -> str:
    """The fragment of `pieces`, each sentence replaced by the next translation, escaped."""
    return sentences.join(pieces, (html.escape(text, quote=False) for text in translations))
