"""Translated documents waiting to be downloaded, each under a name nobody can guess, for a
time.

A translation is written into a private temporary directory (mode 0700, removed with the
store) under a new random name (`secrets.token_urlsafe`: 256 bits), which is also its URL's
last part; the client's file name is only the name it is downloaded under (Content-Disposition).
A download looks its name up among the names given, so a name from a request never becomes a
path, and none but the files given can be read. Each is deleted `expiry_s` seconds after it is
stored: the store sweeps the expired ones whenever it stores or fetches, and a thread of its
own every `SWEEP_S` seconds at most, on the clock it is given (`time.monotonic`), so a test can
move time on.
"""

import os
import secrets
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

SWEEP_S = 60.0  # the longest an expired file stays on disk, unasked for


@dataclass(frozen=True)
class Stored:
    """A translation waiting: its file, the name it is downloaded under, its media type, and
    when it expires (on the store's clock)."""

    path: Path
    filename: str
    media_type: str
    expires: float


class Downloads:
    """The translations waiting to be downloaded; see the module docstring."""

    def __init__(self, expiry_s: float, clock=time.monotonic):
        self.expiry_s = expiry_s
        self._clock = clock
        self._directory = tempfile.TemporaryDirectory(prefix="keras-transformer-documents-")
        self._stored: dict[str, Stored] = {}
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._sweeper = threading.Thread(
            target=self._sweep_until_closed, name="download-sweeper", daemon=True
        )

    def store(self, data: bytes, filename: str, media_type: str) -> str:
        """Keeps `data` for `expiry_s`; returns its new name."""
        name = secrets.token_urlsafe(32)
        path = Path(self._directory.name) / name
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as file:
            file.write(data)
        with self._lock:
            self._sweep()
            self._stored[name] = Stored(path, filename, media_type, self._clock() + self.expiry_s)
            if self._sweeper.ident is None:  # started with the first file
                self._sweeper.start()
        return name

    def fetch(self, name: str) -> tuple[Stored, bytes] | None:
        """The translation stored under `name` and its bytes, or None: never stored, or
        expired and deleted."""
        with self._lock:
            self._sweep()
            stored = self._stored.get(name)
        if stored is None:
            return None
        try:
            return stored, stored.path.read_bytes()
        except FileNotFoundError:  # expired between the look-up and the read
            return None

    def __len__(self) -> int:
        with self._lock:
            self._sweep()
            return len(self._stored)

    def _sweep(self):
        now = self._clock()
        for name in [name for name, stored in self._stored.items() if stored.expires <= now]:
            self._stored.pop(name).path.unlink(missing_ok=True)

    def _sweep_until_closed(self):
        while not self._closed.wait(min(self.expiry_s, SWEEP_S)):
            with self._lock:
                self._sweep()

    def close(self):
        """Deletes every file, and the directory, and ends the sweeps."""
        self._closed.set()
        with self._lock:
            self._stored.clear()
        self._directory.cleanup()
