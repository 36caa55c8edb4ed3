"""The pages of a memory-mapped model file that a process holds, and dropping them.

LiteRT maps a `.tflite` file into memory rather than reading it. XNNPACK, its CPU kernels,
repacks the weights of every operation it runs into memory of its own on the first call, so from
then on most of the file's pages (an int8 export's matrices) are never read again; yet they stay
in the process's resident memory until the kernel needs the memory back. Dropping them
(`madvise(MADV_DONTNEED)` on the mapping, Linux) leaves the file in the page cache, where the
kernel can reclaim it, and reads back any page that is touched again (the embedding rows looked
up, the weights of operations XNNPACK does not run). Nothing changes in what the model computes.

Example (Linux; any file mapped by the process)::

    resident_bytes("model.tflite")    # 106_000_000, say, after the first call
    drop_pages("model.tflite")        # the bytes dropped
    resident_bytes("model.tflite")    # 0 until pages are touched again
"""

import ctypes
import ctypes.util
import logging
import os
import re
from pathlib import Path

logger = logging.getLogger(__name__)

SMAPS = Path("/proc/self/smaps")
MADV_DONTNEED = 4
# A mapping's first line in smaps: "start-end perms offset dev inode path".
MAPPING_LINE = re.compile(r"^([0-9a-f]+)-([0-9a-f]+) \S+ \S+ \S+ \S+\s+(.*)$")


def mappings(path) -> list[tuple[int, int, int]]:
    """This process's mappings of the file `path`: (start address, length, resident bytes) each;
    none where the system has no `/proc/self/smaps`."""
    if not SMAPS.exists():
        return []
    target = os.path.realpath(path)
    found, current = [], None
    with SMAPS.open(encoding="utf-8", errors="replace") as smaps:
        for line in smaps:
            mapping = MAPPING_LINE.match(line)
            if mapping:
                start, end, mapped = mapping.groups()
                current = None
                if mapped == target:
                    current = [int(start, 16), int(end, 16) - int(start, 16), 0]
                    found.append(current)
            elif current is not None and line.startswith("Rss:"):
                current[2] = int(line.split()[1]) * 1024
    return [tuple(mapping) for mapping in found]


def resident_bytes(path) -> int:
    """How much of the file `path` this process holds in memory through its mappings."""
    return sum(resident for _, _, resident in mappings(path))


def drop_pages(path) -> int:
    """Drops this process's resident pages of every mapping of the file `path` and returns the
    bytes they held; 0 where the system cannot (no smaps, no `madvise`), which changes nothing
    but the memory."""
    found = mappings(path)
    if not found:
        return 0
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    dropped = 0
    for start, length, resident in found:
        if libc.madvise(start, length, MADV_DONTNEED) == 0:
            dropped += resident
        else:
            logger.debug("madvise on %s: %s", path, os.strerror(ctypes.get_errno()))
    return dropped
