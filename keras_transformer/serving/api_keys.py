"""API keys and request rate limits of the LibreTranslate API, as LibreTranslate applies them.

LibreTranslate keeps its keys in a database, each with a request limit a minute and an optional
character limit; ours are a text file (`read_api_keys`), one key a line:

    # comments and blank lines are skipped
    KEY                  # the server's req_limit and char_limit
    KEY 120              # 120 requests a minute
    KEY 120 5000         # and texts of at most 5000 characters

A request with a key is counted against its key's limit, one without against its client's
address (the server's `req_limit`), in a window of the last minute (LibreTranslate's
"moving-window" strategy): `RateLimiter`.
"""

import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from keras_transformer.errors import ConfigError

WINDOW_S = 60.0


@dataclass(frozen=True)
class ApiKey:
    """A key's limits; -1: the server's (`req_limit`, `char_limit`)."""

    req_limit: int = -1
    char_limit: int = -1


def read_api_keys(path: Path) -> dict[str, ApiKey]:
    """{key: its limits} of an API keys file (the module docstring's format)."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"api_keys {path} cannot be read: {error}") from None
    keys = {}
    for number, line in enumerate(lines, start=1):
        fields = line.split("#")[0].split()
        if not fields:
            continue
        if len(fields) > 3 or not all(f.isdigit() for f in fields[1:]):
            raise ConfigError(
                f"api_keys {path} line {number}: expected KEY [REQUESTS_A_MINUTE [CHAR_LIMIT]], "
                f"got {line.strip()!r}"
            )
        if fields[0] in keys:
            raise ConfigError(f"api_keys {path} line {number}: key {fields[0]!r} is repeated")
        keys[fields[0]] = ApiKey(*(int(f) for f in fields[1:]))
    return keys


class RateLimiter:
    """Requests a minute by key (an API key or a client's address), counted over the last
    `WINDOW_S` seconds. Thread-safe."""

    def __init__(self, clock=time.monotonic):
        self._clock = clock
        self._times: dict[str, deque] = {}
        self._lock = threading.Lock()

    def allow(self, key: str, limit: int) -> bool:
        """Whether one more request of `key` is within `limit` a minute (-1: no limit); an
        allowed request is counted."""
        if limit < 0:
            return True
        now = self._clock()
        with self._lock:
            self._forget_before(now - WINDOW_S)
            times = self._times.setdefault(key, deque())
            if len(times) >= limit:
                return False
            times.append(now)
            return True

    def _forget_before(self, start):
        """Drops the requests older than the window, and the keys left with none, so that the
        clients of long ago take no memory."""
        for key in list(self._times):
            times = self._times[key]
            while times and times[0] < start:
                times.popleft()
            if not times:
                del self._times[key]
