"""`export.mapped_pages`: the pages of a mapped file this process holds, dropped and read back
unchanged, as `TFLiteTranslator` drops its model file's after the first call."""

import mmap
import sys

import numpy as np
import pytest

from keras_transformer.export import mapped_pages

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc/self/smaps")


@pytest.fixture
def mapped_file(tmp_path):
    path = tmp_path / "weights.bin"
    contents = np.random.default_rng(0).integers(0, 256, 16 * 2**20, np.uint8).tobytes()
    path.write_bytes(contents)
    with path.open("rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        yield path, mapped, contents


def test_a_read_mapping_is_resident_and_its_pages_drop(mapped_file):
    path, mapped, contents = mapped_file
    assert mapped_pages.resident_bytes(path) == 0  # mapped, not read
    assert mapped[:] == contents
    ((_, length, resident),) = mapped_pages.mappings(path)
    assert length == len(contents) and resident == len(contents)
    assert mapped_pages.drop_pages(path) == len(contents)
    assert mapped_pages.resident_bytes(path) == 0


def test_dropped_pages_read_back_unchanged_and_only_those_touched(mapped_file):
    path, mapped, contents = mapped_file
    mapped[:]
    mapped_pages.drop_pages(path)
    assert mapped[2**20 : 2**20 + 10] == contents[2**20 : 2**20 + 10]
    # The page read, and the neighbours the kernel maps with it (up to a 2 MiB folio).
    assert 0 < mapped_pages.resident_bytes(path) <= len(contents) // 4
    assert mapped[:] == contents


def test_a_file_not_mapped_has_nothing_to_drop(tmp_path):
    path = tmp_path / "unmapped.bin"
    path.write_bytes(b"\0" * 4096)
    assert mapped_pages.mappings(path) == []
    assert mapped_pages.drop_pages(path) == 0
