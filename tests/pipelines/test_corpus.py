"""Bad input gets a clear error naming the file and line, and nothing is lost silently."""

import gzip
import logging

import pytest

from pipelines import CorpusError, corpus_files, read_parallel_corpus
from pipelines.corpus import read_lines


def write(path, lines: bytes):
    path.write_bytes(lines)
    return path


def test_mismatched_line_counts_name_both_files(tmp_path):
    source = write(tmp_path / "a.en", b"one\ntwo\nthree\n")
    target = write(tmp_path / "a.de", b"eins\nzwei\n")
    with pytest.raises(CorpusError, match=r"a\.en has 3 lines.*a\.de has 2"):
        read_parallel_corpus(source, target)


def test_invalid_utf8_names_file_and_line(tmp_path):
    source = write(tmp_path / "b.en", b"fine\nalso fine\nbroken \xff\xfe here\n")
    target = write(tmp_path / "b.de", b"gut\nauch gut\nkaputt\n")
    with pytest.raises(CorpusError, match=r"b\.en, line 3: invalid UTF-8"):
        read_parallel_corpus(source, target)


@pytest.mark.parametrize("damage", ["truncated", "not gzip"])
def test_a_corrupt_gzip_names_the_file(tmp_path, damage):
    packed = gzip.compress(b"".join(b"line %d\n" % i for i in range(5000)))
    data = packed[: len(packed) // 2] if damage == "truncated" else b"plain text, not gzip\n"
    source = write(tmp_path / "d.en.gz", data)
    with pytest.raises(CorpusError, match=r"d\.en\.gz, after line \d+: unreadable"):
        read_lines(source)


def test_missing_file_names_the_path(tmp_path):
    with pytest.raises(CorpusError, match="nothere.en"):
        read_parallel_corpus(tmp_path / "nothere.en", tmp_path / "nothere.de")
    with pytest.raises(CorpusError, match="train.en.gz"):
        corpus_files("multi30k", tmp_path, "en", "de")


def test_empty_lines_are_dropped_counted_and_logged(tmp_path, caplog):
    source = tmp_path / "c.en.gz"
    with gzip.open(source, "wb") as f:
        f.write(b"a\n\nc\nd\n")
    target = write(tmp_path / "c.de", b"A\nB\n\nD\n")
    with caplog.at_level(logging.WARNING):
        corpus = read_parallel_corpus(source, target)
    assert (corpus.source, corpus.target, corpus.empty_dropped) == (["a", "d"], ["A", "D"], 2)
    assert "dropped 2 of 4 pairs" in caplog.text


def test_multi30k_files_for_every_pair(multi30k_dir):
    for target in ("de", "fr", "cs"):
        files = corpus_files("multi30k", multi30k_dir, "en", target)
        assert set(files) == {"train", "validation", "test_2016_flickr"}
        assert len(read_parallel_corpus(*files["validation"])) == 1014
