"""The text of an HTML fragment or page, as LibreTranslate's `format: html` translates it: the
markup (tags, comments, declarations) is kept as written and the text is translated, a sentence
at a time even where inline tags cut it.

The markup is found by the shapes of HTML's tokens (WHATWG HTML §13.1: `<name ...>`,
`</name>`, `<!-- ... -->`, `<!...>`, `<?...>`), not by a parser that builds a tree, so
unbalanced or unclosed tags change nothing: a `<` that opens no tag (`a < b`) is text, and a tag
left open at the end is kept as markup. Nothing is fetched or expanded: character references
alone are read (`&amp;` → `&`), and written back escaped.

The text between two block boundaries is a paragraph (`runs.Layout`): a tag that is not one of
the `INLINE` ones (`<p>`, `<div>`, `<br>`, `<li>`, ...), a comment or declaration, and the text
of elements that is not prose (`RAW_TEXT`: `<script>`, `<style>`, `<code>`), which is kept. The
inline tags within a paragraph (`<b>`, `<a href=...>`, `<span>`, ...) cut it into runs: its
sentences are translated whole, and the tags put back, as written (attributes and all, never
translated), around the target words aligned to the words they held (`runs.spread`).

Example:
>>> page = read("<p>A <b>dog</b> runs.</p>")
>>> page.paragraphs
[['A ', 'dog', ' runs.']]
>>> page.write([["Ein ", "Hund & Katze", " rennt."]])
'<p>Ein <b>Hund &amp; Katze</b> rennt.</p>'
"""

import html
import re
from collections.abc import Sequence
from dataclasses import dataclass

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
# HTML's phrasing elements that hold prose (WHATWG HTML §3.2.5.2.5), less those whose content
# is not translated (`RAW_TEXT`) or not text (`br`, `img`, `wbr`, form controls).
INLINE = frozenset(
    "a abbr b bdi bdo cite data del dfn em font i ins kbd mark q s samp small span strong sub "
    "sup time u var".split()
)


@dataclass
class HtmlText:
    """An HTML text cut into paragraphs of runs (`paragraphs`, unescaped text) and the markup
    around them; `write` puts new runs in their place."""

    paragraphs: list[list[str]]
    entities: bool  # whether text is read unescaped and written escaped
    _pieces: list  # markup strings, and None where the next paragraph goes
    _glue: list[list[str]]  # each paragraph's inline markup, one between two runs

    def write(self, paragraphs: Sequence[Sequence[str]]) -> str:
        """The text with each paragraph's runs replaced by `paragraphs`' (escaped)."""
        out, next_paragraph = [], iter(zip(paragraphs, self._glue, strict=True))
        for piece in self._pieces:
            if piece is not None:
                out.append(piece)
                continue
            runs, glue = next(next_paragraph)
            out.append(self._escaped(runs[0]))
            for markup, run in zip(glue, runs[1:], strict=True):
                out += [markup, self._escaped(run)]
        return "".join(out)

    def _escaped(self, text: str) -> str:
        return html.escape(text, quote=False) if self.entities else text


def read(text: str, entities: bool = True) -> HtmlText:
    """`text` cut into its markup and the paragraphs of its text (the module docstring);
    without `entities`, text that is not HTML but holds its tags (a subtitle's `<i>`), read and
    written as it is."""
    page = HtmlText([], entities, [], [])
    runs, glue, end, raw = [""], [], 0, None  # raw: the element whose text is being kept

    def close_paragraph():
        nonlocal runs, glue
        if any(run.strip() for run in runs):
            page.paragraphs.append([html.unescape(run) if entities else run for run in runs])
            page._glue.append(glue)
            page._pieces.append(None)
        else:  # nothing to translate: kept as written
            page._pieces.append("".join(r + m for r, m in zip(runs, [*glue, ""], strict=True)))
        runs, glue = [""], []

    for match in MARKUP.finditer(text):
        markup, between = match.group(), text[end : match.start()]
        end = match.end()
        tag = TAG_NAME.match(markup)
        name = tag[2].lower() if tag else None
        if raw is not None:
            page._pieces += [between, markup]
            if tag and tag[1] == "/" and name == raw:
                raw = None
            continue
        runs[-1] += between
        if name in INLINE:
            glue.append(markup)
            runs.append("")
            continue
        close_paragraph()
        page._pieces.append(markup)
        if name in RAW_TEXT and not tag[1]:
            raw = name
    if raw is not None:
        page._pieces.append(text[end:])
    else:
        runs[-1] += text[end:]
        close_paragraph()
    return page
