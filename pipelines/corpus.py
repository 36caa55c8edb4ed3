"""Parallel text corpora (§5.1): two aligned files, line i of one translating line i of the other.

Reading validates what a silent pipeline would get wrong: files of different lengths (an error
naming both files and counts), bytes that are not UTF-8 (an error naming file and line), missing
files (an error with the path). Empty lines are dropped, counted and logged, never silently.
"""

import dataclasses
import gzip
import logging
import zlib
from pathlib import Path

from base_errors import KerasTransformerError

logger = logging.getLogger(__name__)


class CorpusError(KerasTransformerError, ValueError):
    """A corpus file is missing, misaligned or undecodable; the message says where."""


@dataclasses.dataclass
class ParallelCorpus:
    """Aligned sentence pairs and what was dropped on the way."""

    source: list[str]
    target: list[str]
    source_path: Path
    target_path: Path
    empty_dropped: int = 0

    def __len__(self):
        return len(self.source)


def iter_lines(path):
    """The lines of a plain or gzipped UTF-8 file, decoded one at a time (newlines kept), so a
    file of any size streams; errors name the file, the line and the bytes at fault."""
    path = Path(path)
    if not path.is_file():
        raise CorpusError(f"corpus file not found: {path}")
    number = 0
    opened = gzip.open(path, "rb") if path.suffix == ".gz" else path.open("rb")
    with opened as file:
        try:
            for number, raw in enumerate(file, start=1):  # noqa: B007 (named in errors)
                yield _decoded(raw, path, number)
        except (OSError, EOFError, zlib.error) as error:  # a corrupt or truncated .gz
            raise CorpusError(f"{path}, after line {number}: unreadable: {error}") from error


def _decoded(raw: bytes, path, line) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise CorpusError(
            f"{path}, line {line}: invalid UTF-8 {raw[error.start : error.end]!r} at byte "
            f"{error.start} ({error.reason}) in {raw[:80]!r}"
        ) from error


def read_lines(path) -> list[str]:
    """Lines of a plain or gzipped UTF-8 file, stripped; errors name the file and line."""
    return [line.strip() for line in iter_lines(path)]


def read_aligned_lines(source_path, target_path) -> tuple[list[str], list[str]]:
    """The lines of two files that must align line by line; a count mismatch names both."""
    source, target = read_lines(source_path), read_lines(target_path)
    if len(source) != len(target):
        raise CorpusError(
            f"line counts differ: {source_path} has {len(source)} lines, "
            f"{target_path} has {len(target)}"
        )
    return source, target


def read_parallel_corpus(source_path, target_path) -> ParallelCorpus:
    """Reads two aligned files, dropping (and counting) pairs with an empty side."""
    source, target = read_aligned_lines(source_path, target_path)
    kept = [(s, t) for s, t in zip(source, target, strict=True) if s and t]
    dropped = len(source) - len(kept)
    if dropped:
        logger.warning(
            "dropped %d of %d pairs with an empty side from %s / %s",
            dropped,
            len(source),
            source_path,
            target_path,
        )
    return ParallelCorpus(
        source=[s for s, _ in kept],
        target=[t for _, t in kept],
        source_path=Path(source_path),
        target_path=Path(target_path),
        empty_dropped=dropped,
    )
