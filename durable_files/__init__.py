"""Files written so that no crash leaves them half-written, and locks that end with their process.

Every file keras-transformer and its pipelines write (vocabularies, prepared shards' manifests,
weights, run records, exports) goes through `write_atomically`: a run killed mid-write, or a
machine that loses power, leaves the old file or none, never a truncated one. A write that fails
(a full disk, a file-size limit, an I/O error) is one `WriteError` naming the file.

The bottom of the house: the standard library (and `base_errors`) only, so that both
`pipelines` (which must not import `keras_transformer`) and `keras_transformer` use it, and
importing it loads no framework.
"""

import contextlib
import errno
import os
import shutil
from pathlib import Path

from base_errors import KerasTransformerError


def write_atomically(path, write) -> None:
    """Calls `write(sibling_path)`, flushes that file to the disk, renames it over `path` (atomic
    on POSIX), then flushes the directory entry: a run killed mid-write, or a machine that loses
    power, leaves the old file or none, never a truncated one that a resume would load.

    A write that fails (a full disk, a file-size limit, an I/O error) removes the sibling and
    raises `WriteError`, naming `path`, with the old file left as it was.
    """
    path = Path(path)
    partial = path.with_name(f"partial-{path.name}")  # keeps the suffix Keras checks
    try:
        write(partial)
        sync_to_disk(partial)
        os.replace(partial, path)
        sync_to_disk(path.parent)
    except BaseException as error:
        partial.unlink(missing_ok=True)
        if isinstance(error, OSError):
            raise write_error(path, error) from error
        raise


def copy_atomically(source, target) -> None:
    """Copies the file `source` to `target` through `write_atomically`."""
    write_atomically(target, lambda partial: shutil.copyfile(source, partial))


class WriteError(KerasTransformerError, RuntimeError):
    """A file could not be written (disk full, file too large, I/O error); the message names it
    and says that nothing older was replaced."""


def write_error(path, error: Exception) -> WriteError:
    """The `WriteError` of `error` (an `OSError`, or a library's error), raised while writing
    `path`."""
    number = getattr(error, "errno", None)
    reason = os.strerror(number) if number else str(error).splitlines()[0]
    code = errno.errorcode.get(number, "")
    return WriteError(
        f"cannot write {path}: {reason}{f' ({code})' if code else ''}; what it held before is "
        "unchanged: free space (or raise the limit) and rerun"
    )


def sync_to_disk(path) -> None:
    """fsync of a file or a directory (its entries: a rename in it), so that they outlive a
    crash of the machine."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    except OSError as error:
        if error.errno != errno.EINVAL:  # a file system that cannot sync directories
            raise
    finally:
        os.close(descriptor)


@contextlib.contextmanager
def hold_lock(path, blocking=True):
    """An advisory lock (`fcntl.flock`) on `path`, a directory or a file (created if need be),
    held while the block runs; yields its descriptor (a file's opened to read and write). The
    system releases it when the process ends, however it ends. Not `blocking`: raises
    `BlockingIOError` at once while another process holds it."""
    import fcntl

    flags = os.O_RDONLY if Path(path).is_dir() else os.O_RDWR | os.O_CREAT
    descriptor = os.open(path, flags, 0o644)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        yield descriptor
    finally:
        os.close(descriptor)
