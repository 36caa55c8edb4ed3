"""LibreTranslate's `/translate_file` on a real server: a document of each format, built here with
its own library, goes in; its translation, downloaded from the URL given, opens with the same
library, holds the translation of each sentence as `/translate` (through the real
`libretranslatepy` client) gives it, and keeps its structure (paragraphs, runs and their bold and
italic, tables, slides and shapes, cues and their timings, markup). Hostile files are refused in
words, with their status, before any translation; downloads have unguessable names and expire
on the server's clock (the test's own). Also `/frontend/settings`, `/suggest` and `/health`."""

import base64
import html
import io
import re
import struct
import threading
import zipfile

import docx
import httpx
import numpy as np
import pptx
import pysrt
import pytest
from ebooklib import epub
from libretranslatepy import LibreTranslateAPI
from odf import teletype
from odf.draw import Frame, Page, TextBox
from odf.opendocument import OpenDocumentPresentation, OpenDocumentText, load
from odf.style import MasterPage, PageLayout
from odf.text import H, P, Span, Tab
from pptx.util import Inches

from keras_transformer.server.apis.alignment import alignment_layer, word_links
from keras_transformer.server.apis.libretranslate import LibreTranslate, LibreTranslateSettings
from keras_transformer.server.documents.html_text import MARKUP
from keras_transformer.server.documents.runs import spread
from keras_transformer.server.documents.settings import DocumentSettings
from keras_transformer.server.models.lifecycle import ServedModel
from keras_transformer.server.models.limits import Limits
from keras_transformer.server.models.model_manager import ModelManager
from keras_transformer.server.server import ModelServer
from keras_transformer.server.settings import Network, ServerSettings
from serving_clients import predict_outputs
from waiting import wait_until

pytestmark = pytest.mark.slow  # exports and serves a model

DOCUMENTS = DocumentSettings(
    max_file_bytes=48 * 1024,
    max_file_sentences=30,
    max_unpacked_bytes=2 * 1024 * 1024,
    max_compression_ratio=50,
    download_expiry_s=60.0,
)
DOCX_TYPE = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"


@pytest.fixture(autouse=True)
def _seed():
    """No Keras seeding between these tests (nothing here builds a model)."""


class Clock:
    """The downloads' clock, moved on by the test."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


@pytest.fixture(scope="module")
def clock():
    return Clock()


@pytest.fixture(scope="module")
def server(exported, tmp_path_factory, clock):
    keys = tmp_path_factory.mktemp("keys") / "api_keys"
    keys.write_text("good-key\nslow-key 1\n")
    settings = ServerSettings(
        network=Network(rest_port=0, grpc_port=0, max_body_bytes=64 * 1024),
        limits=Limits(max_sentences_per_request=8),
        documents=DOCUMENTS,
    )
    server = ModelServer(ModelManager([ServedModel("m30k-ende", exported)]), settings)
    LibreTranslate.add_to(server, LibreTranslateSettings(api_keys=keys), clock=clock)
    server.start()
    yield server
    server.stop()
    # Stopped, the server ends the download sweeps and deletes the files left to download.
    wait_until(lambda: "download-sweeper" not in [t.name for t in threading.enumerate()], 10)


def url(server, path=""):
    return f"http://127.0.0.1:{server.rest_port}{path}"


def post_file(server, name, data, target="de", **fields) -> httpx.Response:
    """`/translate_file` as LibreTranslate's page and clients post it."""
    form = {"source": "en", "target": target, "api_key": "good-key"} | fields
    return httpx.post(
        url(server, "/translate_file"), data=form, files={"file": (name, data)}, timeout=120
    )


def translated_file(server, name, data) -> httpx.Response:
    reply = post_file(server, name, data)
    assert reply.status_code == 200, reply.text
    (file_url,) = reply.json().values()
    assert file_url.startswith(url(server, "/download_file/"))
    download = httpx.get(file_url, timeout=120)
    assert download.status_code == 200, download.text
    return download


@pytest.fixture(scope="module")
def translate(server):
    """The translation of a text by `/translate`, through libretranslatepy."""
    client = LibreTranslateAPI(url(server), api_key="good-key")
    return lambda text: client.translate(text, "en", "de")


def translate_json(server, q, text_format="text") -> str:
    """The translation of a text by `/translate`, in a JSON body (whose line ends are kept)."""
    body = {"q": q, "source": "en", "target": "de", "format": text_format, "api_key": "good-key"}
    reply = httpx.post(url(server, "/translate"), json=body, timeout=120)
    assert reply.status_code == 200, reply.text
    return reply.json()["translatedText"]


# A 1×1 PNG, for a picture in a run.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


def cells(table) -> list:
    return [cell for row in table.rows for cell in row.cells]


def styles(paragraph) -> list:
    return [(run.bold, run.italic) for run in paragraph.runs]


def test_docx_keeps_its_paragraphs_runs_styles_and_tables(server, translate):
    source = docx.Document()
    paragraph = source.add_paragraph("A ")
    paragraph.add_run("dog").bold = True
    paragraph.add_run(" runs in the park. Two men play football.")
    source.add_paragraph().add_run("A girl is eating.").italic = True
    source.add_paragraph("")
    source.add_paragraph("A picture: ").add_run().add_picture(io.BytesIO(PNG))
    table = source.add_table(rows=2, cols=2)
    texts = ["A man sleeps.", "Two dogs.", "The sun shines.", "Children play."]
    for cell, text in zip(cells(table), texts, strict=True):
        cell.text = text
    data = io.BytesIO()
    source.save(data)

    download = translated_file(server, "letter.docx", data.getvalue())
    assert download.headers["content-type"] == DOCX_TYPE
    assert download.headers["content-disposition"].startswith(
        'attachment; filename="letter_de.docx"'
    )
    assert download.headers["content-security-policy"] == "sandbox"  # never a page of ours
    assert download.headers["x-content-type-options"] == "nosniff"
    result = docx.Document(io.BytesIO(download.content))
    source = docx.Document(io.BytesIO(data.getvalue()))
    assert len(result.paragraphs) == len(source.paragraphs)
    for before, after in zip(source.paragraphs, result.paragraphs, strict=True):
        assert styles(after) == styles(before)
        assert after.text == (translate(before.text) if before.text.strip() else before.text)
    assert len(result.tables) == 1 and len(result.inline_shapes) == 1
    assert [cell.text for cell in cells(result.tables[0])] == [
        translate(cell.text) for cell in cells(source.tables[0])
    ]


def test_pptx_keeps_its_slides_shapes_and_runs(server, translate):
    source = pptx.Presentation()
    texts = [["A dog runs.", "Two men play football."], ["A girl is eating."]]
    for slide_texts in texts:
        slide = source.slides.add_slide(source.slide_layouts[6])
        frame = slide.shapes.add_textbox(Inches(1), Inches(1), Inches(6), Inches(2)).text_frame
        first = frame.paragraphs[0]
        first.add_run().text = "A "
        bold = first.add_run()
        bold.text, bold.font.bold = "woman", True
        first.add_run().text = " walks."
        for text in slide_texts:
            frame.add_paragraph().text = text
        table = slide.shapes.add_table(1, 2, Inches(1), Inches(4), Inches(4), Inches(1)).table
        table.cell(0, 0).text, table.cell(0, 1).text = "A cat.", "Two birds."
    data = io.BytesIO()
    source.save(data)

    result = pptx.Presentation(
        io.BytesIO(translated_file(server, "talk.pptx", data.getvalue()).content)
    )
    source = pptx.Presentation(io.BytesIO(data.getvalue()))
    assert len(result.slides) == len(source.slides)
    for before, after in zip(source.slides, result.slides, strict=True):
        shapes = list(zip(before.shapes, after.shapes, strict=True))
        assert [(b.left, b.top, b.width, b.height) for b, _ in shapes] == [
            (a.left, a.top, a.width, a.height) for _, a in shapes
        ]
        for b, a in shapes:
            frames = (
                [(b.text_frame, a.text_frame)]
                if b.has_text_frame
                else [
                    (cb.text_frame, ca.text_frame)
                    for cb, ca in zip(b.table.iter_cells(), a.table.iter_cells(), strict=True)
                ]
            )
            for frame_b, frame_a in frames:
                for pb, pa in zip(frame_b.paragraphs, frame_a.paragraphs, strict=True):
                    assert [r.font.bold for r in pa.runs] == [r.font.bold for r in pb.runs]
                    assert pa.text == translate(pb.text)


def test_odt_keeps_its_paragraphs_spans_and_headings(server, translate):
    source = OpenDocumentText()
    source.text.addElement(H(outlinelevel=1, text="Dogs in the park."))
    paragraph = P(text="A ")
    paragraph.addElement(Span(text="dog"))
    paragraph.addText(" runs. Two men  play.")
    source.text.addElement(paragraph)
    tabbed = P(text="Name:")  # a tab ends a sentence
    tabbed.addElement(Tab())
    tabbed.addText("A big dog.")
    source.text.addElement(tabbed)
    data = io.BytesIO()
    source.write(data)

    download = translated_file(server, "notes.odt", data.getvalue())
    result = load(io.BytesIO(download.content))
    source = load(io.BytesIO(data.getvalue()))
    for kind in (H, P, Span, Tab):
        assert len(result.getElementsByType(kind)) == len(source.getElementsByType(kind))
    texts = [
        teletype.extractText(p) for p in source.getElementsByType(H) + source.getElementsByType(P)
    ]
    expected = [translate(text) for text in texts[:-1]]
    expected.append("\t".join(translate(part) for part in texts[-1].split("\t")))
    assert [
        teletype.extractText(p) for p in result.getElementsByType(H) + result.getElementsByType(P)
    ] == expected


def test_odp_keeps_its_slides_frames_and_spans(server, translate):
    source = OpenDocumentPresentation()
    layout = PageLayout(name="layout")
    source.automaticstyles.addElement(layout)
    master = MasterPage(name="master", pagelayoutname=layout)
    source.masterstyles.addElement(master)
    for texts in (["A dog runs. Two men play."], ["A girl is eating.", "The end."]):
        page = Page(masterpagename=master)
        source.presentation.addElement(page)
        box = TextBox()
        frame = Frame(width="20cm", height="5cm", x="1cm", y="2cm")
        frame.addElement(box)
        page.addElement(frame)
        for text in texts:
            paragraph = P(text="A ")
            paragraph.addElement(Span(text="big"))
            paragraph.addText(" " + text)
            box.addElement(paragraph)
    data = io.BytesIO()
    source.write(data)

    download = translated_file(server, "slides.odp", data.getvalue())
    result, source = (load(io.BytesIO(d)) for d in (download.content, data.getvalue()))
    for kind in (Page, Frame, P, Span):
        assert len(result.getElementsByType(kind)) == len(source.getElementsByType(kind))
    frames = [
        [f.getAttribute(a) for a in ("x", "y", "width")] for f in source.getElementsByType(Frame)
    ]
    assert frames == [
        [f.getAttribute(a) for a in ("x", "y", "width")] for f in result.getElementsByType(Frame)
    ]
    for before, after in zip(source.getElementsByType(P), result.getElementsByType(P), strict=True):
        assert teletype.extractText(after) == translate(teletype.extractText(before))


def test_epub_documents_are_translated_as_html_and_the_rest_kept(server):
    book = epub.EpubBook()
    book.set_identifier("id-1")
    book.set_title("Dogs")
    book.set_language("en")
    chapter = epub.EpubHtml(title="One", file_name="one.xhtml", lang="en")
    chapter.content = "<h1>Dogs.</h1><p>A <b>dog</b> runs. <i>Two men</i> play.</p>"
    book.add_item(chapter)
    book.toc = [chapter]
    book.spine = ["nav", chapter]
    book.add_item(epub.EpubNcx())
    book.add_item(epub.EpubNav())
    data = io.BytesIO()
    epub.write_epub(data, book)

    download = translated_file(server, "book.epub", data.getvalue())
    before, after = (zipfile.ZipFile(io.BytesIO(d)) for d in (data.getvalue(), download.content))
    assert before.namelist() == after.namelist()
    for name in before.namelist():
        original = before.read(name)
        if name.endswith(".xhtml"):  # the chapter, and the navigation (its contents)
            assert after.read(name).decode() == translate_json(server, original.decode(), "html")
        else:
            assert after.read(name) == original, name
    read_back = epub.read_epub(io.BytesIO(download.content))
    assert read_back.get_item_with_href("one.xhtml") is not None


def test_html_keeps_its_markup_and_srt_its_cues_and_timings(server, translate):
    page = '<html><body><p>A <b>dog</b> runs to <a href="/park">the park</a>.</p></body></html>'
    translated = translated_file(server, "page.html", page.encode()).content.decode()
    assert translated == translate_json(server, page, "html")
    assert MARKUP.findall(translated) == MARKUP.findall(page)

    cues = pysrt.SubRipFile()
    for k, text in enumerate(["<i>A man is</i>\nwalking.", "Two dogs play."], start=1):
        cues.append(pysrt.SubRipItem(k, start=(0, 0, 2 * k), end=(0, 0, 2 * k + 1), text=text))
    data = io.StringIO()
    cues.write_into(data)
    download = translated_file(server, "film.srt", data.getvalue().encode())
    result = pysrt.from_string(download.content.decode())
    assert [(c.index, c.start, c.end) for c in result] == [(c.index, c.start, c.end) for c in cues]
    for before, after in zip(cues, result, strict=True):  # its tags placed as in HTML
        assert after.text.count("\n") <= before.text.count("\n")
        assert MARKUP.findall(after.text) == MARKUP.findall(before.text)
        as_html = translate_json(server, " ".join(before.text.split()), "html")
        assert " ".join(after.text.split()) == " ".join(html.unescape(as_html).split())

    text = "A dog runs.\n\nTwo men play football!  A girl is eating.\n"
    assert translated_file(server, "a.txt", text.encode()).content.decode() == translate_json(
        server, text
    )


def test_a_sentence_across_inline_tags_is_translated_whole(server, translate):
    """The issue's example: one sentence, with <b> around the words aligned to "dog" by the
    model's attention, read here through TF Serving's API."""
    translation = translate("A dog runs.")
    inputs = {"text": ["A dog runs."], "translation": [translation]}
    outputs = predict_outputs(server, "m30k-ende", "attention", inputs)
    cross = np.array(outputs["encoder_decoder_attention"][0])
    attention = cross[alignment_layer(len(cross))].mean(axis=0)
    pieces = outputs["source_pieces"][0], outputs["target_pieces"][0]
    links = word_links(*pieces, attention, "A dog runs.", translation)
    placed = spread(["A ", "dog", " runs."], translation, links)
    before, bold, after = (html.escape(text, quote=False) for text in placed)
    translated = translate_json(server, "<p>A <b>dog</b> runs.</p>", "html")
    assert translated == f"<p>{before}<b>{bold}</b>{after}</p>"


def zipped(members: dict, compression=zipfile.ZIP_DEFLATED) -> bytes:
    data = io.BytesIO()
    with zipfile.ZipFile(data, "w", compression) as packed:
        for name, content in members.items():
            packed.writestr(name, content)
    return data.getvalue()


def docx_bytes() -> bytes:
    data = io.BytesIO()
    docx.Document().save(data)
    return data.getvalue()


def with_member(document: bytes, name: str, content) -> bytes:
    """`document` (a zip) with member `name` replaced or added."""
    source = zipfile.ZipFile(io.BytesIO(document))
    members = {n: source.read(n) for n in source.namelist()} | {name: content}
    return zipped(members)


def laughs() -> str:
    """The billion laughs: ten entities, each ten of the one before."""
    entities = ['<!ENTITY lol0 "lol">']
    entities += [f'<!ENTITY lol{k} "{f"&lol{k - 1};" * 10}">' for k in range(1, 10)]
    return f'<?xml version="1.0"?><!DOCTYPE d [{"".join(entities)}]><d>&lol9;</d>'


XXE = '<?xml version="1.0"?><!DOCTYPE d [<!ENTITY x SYSTEM "file:///etc/passwd">]><d>&x;</d>'
ODS = "application/vnd.oasis.opendocument.spreadsheet"


def pptx_bytes() -> bytes:
    data = io.BytesIO()
    pptx.Presentation().save(data)
    return data.getvalue()


def bomb() -> bytes:
    """A small .docx that unpacks to 300 times its size: within max_unpacked_bytes, but far
    beyond max_compression_ratio."""
    return zipped({"[Content_Types].xml": "<Types/>", "word/document.xml": b"\0" * 300_000})


def lying_bomb() -> bytes:
    """A .docx whose directory declares its 10 MB document 100 bytes: never unpacked past them."""
    packed = bytearray(
        zipped({"[Content_Types].xml": "<Types/>", "word/document.xml": b"\0" * 10**7})
    )
    for header, size_at in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):  # local, central
        for start in re.finditer(re.escape(header), bytes(packed)):
            struct.pack_into("<I", packed, start.start() + size_at, 100)
    return bytes(packed)


HOSTILE = {  # name, content, status, words of the reason
    "zip bomb": ("bomb.docx", bomb, 413, "max_compression_ratio"),
    "zip bomb declaring small sizes": ("lying.docx", lying_bomb, 400, "Bad CRC-32"),
    "unpacks too large": (
        "large.docx",
        lambda: with_member(docx_bytes(), "word/media/zeros.bin", b"\0" * 3_000_000),
        413,
        "max_unpacked_bytes",
    ),
    "billion laughs": (
        "laughs.docx",
        lambda: with_member(docx_bytes(), "word/document.xml", laughs()),
        400,
        "entities",
    ),
    "external entity": (
        "xxe.docx",
        lambda: with_member(docx_bytes(), "word/document.xml", XXE),
        400,
        "entities",
    ),
    "broken document": (
        "broken.docx",
        lambda: zipped({"[Content_Types].xml": "<Types/>", "word/document.xml": "<w/>"}),
        400,
        "cannot be read",
    ),
    "macro-enabled name": ("macro.docm", docx_bytes, 415, "macros"),
    "macros inside": (
        "macro.docx",
        lambda: with_member(docx_bytes(), "word/vbaProject.bin", b"VBA"),
        415,
        "macros",
    ),
    "zip named .txt": ("notes.txt", docx_bytes, 415, "zip archive"),
    "text named .docx": ("notes.docx", lambda: b"A dog runs.", 415, "not a zip archive"),
    "pptx named .docx": ("slides.docx", pptx_bytes, 415, "word/document.xml"),
    "spreadsheet named .odt": ("sheet.odt", lambda: zipped({"mimetype": ODS}), 415, ODS),
    "unknown format": ("report.pdf", lambda: b"%PDF-1.7", 415, "file format not supported"),
    "not SubRip": ("film.srt", lambda: b"Just text.", 400, "not SubRip"),
    "not UTF-8": ("latin.txt", lambda: "Café.".encode("latin-1"), 400, "not UTF-8"),
    "too large": ("big.txt", lambda: b"A dog runs. " * 5000, 413, "max_file_bytes"),
    "too many sentences": ("many.txt", lambda: b"A dog runs. " * 31, 400, "max_file_sentences"),
}


@pytest.mark.parametrize("case", HOSTILE)
def test_hostile_files_are_refused_in_words_before_any_work(server, case):
    name, make, status, reason = HOSTILE[case]
    reply = post_file(server, name, make())
    assert reply.status_code == status, reply.text
    assert reason in reply.json()["error"]


def test_downloads_are_unguessable_single_files_that_expire(server, clock):
    reply = post_file(server, "a.txt", b"A dog runs.")
    other = post_file(server, "a.txt", b"A dog runs.")
    first, second = (r.json()["translatedFileUrl"] for r in (reply, other))
    names = [u.rsplit("/", 1)[1] for u in (first, second)]
    assert names[0] != names[1] and all(re.fullmatch(r"[A-Za-z0-9_-]{43}", n) for n in names)
    for guess in ("a.txt", "a_de.txt", "..%2F..%2Fetc%2Fpasswd", names[0][:-1]):
        assert httpx.get(url(server, f"/download_file/{guess}")).status_code == 404
    assert httpx.get(first).status_code == 200
    clock.now += DOCUMENTS.download_expiry_s
    missing = httpx.get(first)
    assert missing.status_code == 404 and "expired" in missing.json()["error"]


def test_translate_file_takes_the_same_keys_and_rate_limits(server):
    assert post_file(server, "a.txt", b"Hi.", api_key="no-such-key").status_code == 403
    assert post_file(server, "a.txt", b"Hi.", api_key="slow-key").status_code == 200
    limited = post_file(server, "a.txt", b"Hi.", api_key="slow-key")
    assert limited.status_code == 429 and "Slowdown" in limited.json()["error"]


def test_libretranslate_api_test_shapes(server):
    """libretranslate/tests/test_api/test_api_translate_file.py and test_api_health.py: the same
    requests, with our languages for theirs; an unknown format is 415 here (400 there)."""

    def post(form, files=None):
        return httpx.post(url(server, "/translate_file"), data=form, files=files, timeout=120)

    hello = {"file": ("test.txt", b"Hello world, this is a test.")}
    reply = post({"source": "en", "target": "de"}, hello)
    assert reply.status_code == 200 and "translatedFileUrl" in reply.json()
    file_url = reply.json()["translatedFileUrl"]
    download = httpx.get(url(server, file_url[file_url.index("/download_file") :]))
    assert download.status_code == 200 and download.content
    assert download.content != b"Hello world, this is a test."
    assert post({"source": "en", "target": "de"}, {"x": ("a", b"")}).status_code == 400
    for form, error in (
        ({"target": "de"}, "Invalid request: missing source parameter"),
        ({"source": "en"}, "Invalid request: missing target parameter"),
        ({"source": "en", "target": "zz"}, "zz is not supported"),
        ({"source": "zz", "target": "de"}, "zz is not supported"),
    ):
        reply = post(form, hello)
        assert (reply.status_code, reply.json()) == (400, {"error": error})
    program = post({"source": "en", "target": "de"}, {"file": ("program.exe", b"MZ\x90\x00")})
    assert program.status_code == 415
    assert program.json()["error"].startswith("Invalid request: file format not supported")
    auto = post(
        {"source": "auto", "target": "de"},
        {"file": ("t.txt", b"Hello world, this is an English sentence.")},
    )
    assert auto.status_code == 200, auto.text
    assert httpx.get(url(server, "/download_file/..")).status_code == 404
    assert httpx.post(url(server, "/health")).status_code == 405


def test_frontend_settings_suggest_and_health_as_libretranslate_answers_them(server):
    """libretranslate/tests/test_api: test_frontend_settings_content and its neighbours."""
    settings = httpx.get(url(server, "/frontend/settings")).json()
    assert settings == {
        "charLimit": -1,
        "frontendTimeout": 500,
        "apiKeys": True,
        "keyRequired": False,
        "suggestions": False,
        "filesTranslation": True,
        "supportedFilesFormat": [
            ".txt",
            ".html",
            ".docx",
            ".odt",
            ".odp",
            ".pptx",
            ".epub",
            ".srt",
        ],
        "language": {
            "source": {"code": "auto", "name": "Auto Detect"},
            "target": {"code": "de", "name": "German"},
        },
    }
    body = {"q": "Hello", "s": "Hallo", "source": "en", "target": "de"}
    suggest = httpx.post(url(server, "/suggest"), data=body)
    assert suggest.status_code == 403
    assert suggest.json() == {"error": "Suggestions are disabled on this server."}
    health = httpx.get(url(server, "/health"), headers={"Origin": "https://example.org"})
    assert health.status_code == 200 and health.json() == {"status": "ok"}
    assert health.headers["access-control-allow-origin"] == "*"
