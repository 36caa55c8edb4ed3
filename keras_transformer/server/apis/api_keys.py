"""API keys and request rate limits of the LibreTranslate API, as LibreTranslate applies them.

LibreTranslate keeps its keys in a database, each with a request limit a minute and an optional
character limit; ours are a text file (`read_api_keys`), one key a line:

    # comments and blank lines are skipped
    KEY                  # the server's req_limit and char_limit
    KEY 120              # 120 requests a minute
    KEY 120 5000         # and texts of at most 5000 characters

A request with a key is counted against its key's limit, one without against its client's
address (the server's `req_limit`), in a window of the last minute (LibreTranslate's
"moving-window" strategy of `limits`, the library behind Flask-Limiter): `RateLimits`.
"""

from dataclasses import dataclass
from pathlib import Path

from limits import RateLimitItemPerMinute
from limits.errors import ConfigurationError
from limits.storage import storage_from_string
from limits.strategies import MovingWindowRateLimiter

from keras_transformer.errors import ConfigError

NAMESPACE = "keras-transformer-libretranslate"  # the counts' keys in a shared storage


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


class RateLimits:
    """Requests a minute by key (an API key or a client's address), counted by `limits` with
    LibreTranslate's moving window in `storage`: "memory://" (this process), or a Redis URL
    ("redis://HOST:PORT") whose one count every replica using it shares. A storage that cannot
    be reached is a ConfigError naming it, before the server answers anything."""

    def __init__(self, storage: str = "memory://"):
        try:
            self._storage = storage_from_string(storage)
        except (ConfigurationError, ValueError) as error:
            raise ConfigError(f"rate_limit_storage {storage!r} cannot be used: {error}") from None
        if not self._storage.check():
            raise ConfigError(f"rate_limit_storage {storage} cannot be reached")
        self._limiter = MovingWindowRateLimiter(self._storage)

    def allow(self, key: str, limit: int) -> bool:
        """Whether one more request of `key` is within `limit` a minute (-1: no limit); an
        allowed request is counted."""
        if limit < 0:
            return True
        return limit > 0 and self._limiter.hit(RateLimitItemPerMinute(limit), NAMESPACE, key)
