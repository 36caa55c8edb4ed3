"""Parallel text corpora (§5.1): two aligned files, line i of one translating line i of the other.

Reading validates what a silent pipeline would get wrong: files of different lengths (an error
naming both files and counts), bytes that are not UTF-8 (an error naming file and line), missing
files (an error with the path). Empty lines are dropped, counted and logged, never silently.
Files the project writes (vocabularies, checkpoints, run records) go through `write_atomically`.
"""

import dataclasses
import gzip
import logging
import os
import zlib
from pathlib import Path

logger = logging.getLogger(__name__)


class CorpusError(ValueError):
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


def write_atomically(path, write) -> None:
    """Calls `write(sibling_path)`, then renames that file over `path` (atomic on POSIX): a run
    killed mid-write leaves the old file or none, never a truncated one that a resume would load.
    """
    path = Path(path)
    partial = path.with_name(f"partial-{path.name}")  # keeps the suffix Keras checks
    write(partial)
    os.replace(partial, path)


def _open_text(path: Path):
    return gzip.open(path, "rb") if path.suffix == ".gz" else path.open("rb")


def read_lines(path) -> list[str]:
    """Lines of a plain or gzipped UTF-8 file, stripped; errors name the file and line."""
    path = Path(path)
    if not path.is_file():
        raise CorpusError(f"corpus file not found: {path}")
    lines = []
    with _open_text(path) as file:
        try:
            for raw in file:
                lines.append(raw.decode("utf-8").strip())
        except UnicodeDecodeError as error:
            raise CorpusError(
                f"{path}, line {len(lines) + 1}: invalid UTF-8 "
                f"({error.reason} at byte {error.start})"
            ) from error
        except (OSError, EOFError, zlib.error) as error:  # a corrupt or truncated .gz
            raise CorpusError(f"{path}, after line {len(lines)}: unreadable: {error}") from error
    return lines


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
