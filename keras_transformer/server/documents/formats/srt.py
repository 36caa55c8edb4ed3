"""SubRip subtitles (.srt, UTF-8) by pysrt: each cue's text is a paragraph, its lines joined by
spaces so that a sentence cut over two lines is translated whole, and its tags (`<i>`, `<b>`,
`<font color=...>`) cutting it into runs, as in HTML (`html_text`, without HTML's entities);
its translation is cut back into as many lines, at the spaces nearest equal lengths. Numbers and
timings are kept."""

import io
import re

import pysrt

from keras_transformer.server.documents import checks, html_text
from keras_transformer.server.documents.document import Document
from keras_transformer.server.errors import bad_request

EXTENSIONS = (".srt",)
MEDIA_TYPE = "application/x-subrip; charset=utf-8"


def read(data: bytes, settings) -> Document:
    content = checks.text(data, ".srt")
    try:
        cues = pysrt.from_string(content, error_handling=pysrt.SubRipFile.ERROR_RAISE)
    except pysrt.Error as error:  # which holds the block that failed: its start is enough
        raise bad_request(
            f"Invalid request: the .srt file is not SubRip ({str(error)[:200]})"
        ) from None
    if not cues:
        raise bad_request("Invalid request: the .srt file holds no subtitle")
    lines = [cue.text.count("\n") + 1 for cue in cues]
    pages = [html_text.read(" ".join(cue.text.split("\n")), entities=False) for cue in cues]

    def write(paragraphs) -> bytes:
        start = 0
        for cue, count, page in zip(cues, lines, pages, strict=True):
            end = start + len(page.paragraphs)
            cue.text = "\n".join(in_lines(page.write(paragraphs[start:end]), count))
            start = end
        out = io.StringIO()
        cues.write_into(out)
        return out.getvalue().encode("utf-8")

    return Document([runs for page in pages for runs in page.paragraphs], write)


# A word and the tags stuck to it; a tag's own spaces (`<font color="red">`) do not cut it.
TOKEN = re.compile(r"(?:<[^>]*>|\S)+")


def in_lines(text: str, count: int) -> list[str]:
    """`text` cut at spaces (not those within tags) into at most `count` lines of about equal
    length."""
    words, lines = TOKEN.findall(text), []
    for k in range(count, 0, -1):
        goal, line = len(" ".join(words)) / k, []
        while words and (not line or len(" ".join(line + words[:1])) <= goal or k == 1):
            line.append(words.pop(0))
        lines.append(" ".join(line))
    return [line for line in lines if line] or [""]
