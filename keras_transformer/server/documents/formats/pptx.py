"""PowerPoint presentations (.pptx) by python-pptx: on each slide, the paragraphs of every shape
with text (in groups too) and of every table cell; each paragraph's runs are its runs, so their
fonts stay on the words aligned to their own. Shapes, their places and the slides' order are
kept."""

import io

import pptx
from pptx.enum.shapes import MSO_SHAPE_TYPE

from keras_transformer.server.documents import checks
from keras_transformer.server.documents.document import Document, of_runs

EXTENSIONS = (".pptx",)
MEDIA_TYPE = "application/vnd.openxmlformats-officedocument.presentationml.presentation"


def read(data: bytes, settings) -> Document:
    checks.archive(data, ".pptx", settings, member="ppt/presentation.xml")
    presentation = pptx.Presentation(io.BytesIO(data))
    runs = [
        list(paragraph.runs)
        for slide in presentation.slides
        for frame in _text_frames(slide.shapes)
        for paragraph in frame.paragraphs
    ]
    return of_runs(runs, presentation.save)


def _text_frames(shapes):
    for shape in shapes:
        if shape.shape_type == MSO_SHAPE_TYPE.GROUP:
            yield from _text_frames(shape.shapes)
        elif shape.has_text_frame:
            yield shape.text_frame
        elif getattr(shape, "has_table", False) and shape.has_table:
            for row in shape.table.rows:
                for cell in row.cells:
                    yield cell.text_frame
