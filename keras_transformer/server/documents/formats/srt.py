"""SubRip subtitles (.srt, UTF-8) by pysrt: each cue's text is a paragraph of one run, its lines
joined by spaces so that a sentence cut over two lines is translated whole; its translation is
cut back into as many lines, at the spaces nearest equal lengths. Numbers and timings are kept.
"""

import io

import pysrt

from keras_transformer.server.documents import checks
from keras_transformer.server.documents.document import Document
from keras_transformer.server.errors import bad_request

EXTENSIONS = (".srt",)
MEDIA_TYPE = "application/x-subrip; charset=utf-8"


def read(data: bytes, settings) -> Document:
    content = checks.text(data, ".srt")
    try:
        cues = pysrt.from_string(content, error_handling=pysrt.SubRipFile.ERROR_RAISE)
    except pysrt.Error as error:
        raise bad_request(f"Invalid request: the .srt file is not SubRip ({error})") from None
    if not cues:
        raise bad_request("Invalid request: the .srt file holds no subtitle")
    lines = [cue.text.count("\n") + 1 for cue in cues]

    def write(paragraphs) -> bytes:
        for cue, count, (text,) in zip(cues, lines, paragraphs, strict=True):
            cue.text = "\n".join(in_lines(text, count))
        out = io.StringIO()
        cues.write_into(out)
        return out.getvalue().encode("utf-8")

    return Document([[" ".join(cue.text.split("\n"))] for cue in cues], write)


def in_lines(text: str, count: int) -> list[str]:
    """`text` cut at spaces into at most `count` lines of about equal length."""
    words, lines = text.split(), []
    for k in range(count, 0, -1):
        goal, line = len(" ".join(words)) / k, []
        while words and (not line or len(" ".join(line + words[:1])) <= goal or k == 1):
            line.append(words.pop(0))
        lines.append(" ".join(line))
    return [line for line in lines if line] or [""]
