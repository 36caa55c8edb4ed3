"""Document translation without a model: sentences across runs put back into their runs by a
hand-set word alignment (and in proportion without one), word alignments read from attention,
and the store of downloads on a clock of the test's own."""

import re

import numpy as np
import pytest

from keras_transformer.server.apis.alignment import word_links
from keras_transformer.server.documents import html_text
from keras_transformer.server.documents.downloads import Downloads
from keras_transformer.server.documents.formats.srt import in_lines
from keras_transformer.server.documents.runs import Layout, spread


@pytest.mark.parametrize(
    "runs, translation, links, expected",
    [
        (  # the example: <b> goes around the word aligned to "dog"
            ["A ", "dog", " runs."],
            "Ein Hund rennt.",
            [(0, 0), (1, 1), (2, 2)],
            ["Ein ", "Hund", " rennt."],
        ),
        (  # the verb moves to the end; the bold one stays on its own word
            ["I ", "have", " eaten an apple."],
            "Ich habe einen Apfel gegessen.",
            [(0, 0), (1, 1), (2, 4), (3, 2), (4, 3)],
            ["Ich ", "habe", " einen Apfel gegessen."],
        ),
        (  # two words into one, and a run at the start
            ["Two ", "big dogs", " play."],
            "Zwei Riesenhunde spielen.",
            [(0, 0), (1, 1), (2, 1), (3, 2)],
            ["Zwei ", "Riesenhunde", " spielen."],
        ),
        (  # the closing period stays out of the italics, as in the source
            ["A ", "cat", "."],
            "Eine Katze.",
            [(0, 0), (1, 1)],
            ["Eine ", "Katze", "."],
        ),
        (  # crossed links (an adjective after its noun): runs keep their order
            ["The ", "red", " car"],
            "La voiture rouge",
            [(0, 0), (1, 2), (2, 1)],
            ["La voiture ", "rouge", ""],
        ),
    ],
)
def test_a_sentence_goes_back_into_its_runs_by_its_alignment(runs, translation, links, expected):
    placed = spread(runs, translation, links)
    assert placed == expected
    assert "".join(placed) == translation


def test_without_alignment_words_are_spread_in_proportion():
    placed = spread(["one two ", "three four"], "eins zwei drei vier", None)
    assert placed == ["eins zwei ", "drei vier"]
    assert spread(["A ", "dog"], "", [(0, 0)]) == ["", ""]


def test_a_layout_translates_whole_sentences_and_keeps_the_spacing_in_its_runs():
    layout = Layout([["A ", "dog", " runs.  It barks.\n"], ["Alone."], ["  "]])
    assert layout.units == ["A dog runs.", "It barks.", "Alone."]
    assert layout.spanning == [0]
    links = [[(0, 0), (1, 1), (2, 2)], None, None]
    runs = layout.put_back(["Ein Hund rennt.", "Er bellt.", "Allein."], links)
    assert runs == [["Ein ", "Hund", " rennt.  Er bellt.\n"], ["Allein."], ["  "]]


def test_html_inline_tags_are_put_back_around_the_aligned_words():
    page = html_text.read('<p>A <b>dog</b> runs to <a href="/park">the park</a>.</p>')
    layout = Layout(page.paragraphs)
    assert layout.units == ["A dog runs to the park."]
    links = [[(0, 0), (1, 1), (2, 2), (3, 3), (5, 4)]]
    translated = layout.put_back(["Ein Hund rennt zum Park."], links)
    assert page.write(translated) == '<p>Ein <b>Hund</b> rennt zum <a href="/park">Park</a>.</p>'


def test_word_links_come_from_the_attention_argmax_lifted_to_words():
    source = ["▁>>fra<<", "▁A", "▁do", "g", "</s>", ""]
    target = ["▁Un", "▁chi", "en", "</s>"]
    attention = np.zeros((4, 6))
    attention[0, 1] = attention[1, 3] = attention[2, 2] = attention[3, 4] = 1.0
    attention[:, 0] = 0.5  # the target token is never aligned to
    assert word_links(source, target, attention, "A dog", "Un chien", 1) == [(0, 0), (1, 1)]
    assert word_links(source, target, attention, "A dog barks", "Un chien", 1) is None


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_downloads_have_unguessable_names_and_expire():
    clock = Clock()
    downloads = Downloads(30.0, clock)
    first = downloads.store(b"one", "a.txt", "text/plain")
    second = downloads.store(b"two", "a.txt", "text/plain")
    assert first != second and re.fullmatch(r"[A-Za-z0-9_-]{43}", first)
    stored, data = downloads.fetch(first)
    assert (data, stored.filename) == (b"one", "a.txt")
    assert downloads.fetch("../" + first) is None and downloads.fetch("a.txt") is None
    clock.now = 29.0
    assert downloads.fetch(second)[1] == b"two"
    clock.now = 30.0
    assert downloads.fetch(first) is None and len(downloads) == 0
    assert not stored.path.exists()
    downloads.close()


def test_a_subtitle_translation_is_cut_into_as_many_lines():
    assert in_lines("Ein Mann geht die Straße entlang", 2) == [
        "Ein Mann geht",
        "die Straße entlang",
    ]
    assert in_lines('<font color="red">Ein Mann</font> geht', 2) == [  # a tag is never cut
        '<font color="red">Ein',
        "Mann</font> geht",
    ]
    assert in_lines("Kurz", 2) == ["Kurz"]
    assert in_lines("Eins zwei", 1) == ["Eins zwei"]
