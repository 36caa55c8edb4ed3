"""TensorFlow Serving's model lifecycle over a base path, with its "latest version" policy.

`<base>/<version>/` directories are versions; the name is read as an integer as TF Serving
reads it ("0002" is version 2, in directory 0002; two directories of one version are both
skipped). The newest complete version is loaded (LOADING, its warm-up requests run), then
served (AVAILABLE); the version it replaces is UNLOADING until the requests in flight on it are
answered, then END. `poll()` looks again, and `start_polling(seconds)` does it in a thread. A
version that is incomplete (no saved_model.pb or variables yet, as while it is being copied) is
skipped with a logged reason and looked at again at the next poll; one that fails to load is END
with its error, and the version before it keeps serving. As TF Serving retries a failed load
(`max_num_load_retries`), a failed version is loaded again at a later poll, after a backoff that
doubles at each failure (`retry_interval_s`, then twice that, ...), up to `max_load_retries`
times: a version copied in two steps, its files present before their contents were whole,
loads once the copy is complete.
"""

import logging
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from keras_transformer.serving.errors import not_found, unavailable
from keras_transformer.serving.servable import AVAILABLE, END, Servable, incomplete

logger = logging.getLogger(__name__)

VERSION_NAME = re.compile(r"[0-9]{1,18}")


@dataclass
class FailedLoads:
    """How often a version failed to load, and when (`time.monotonic`) to try it again."""

    count: int
    retry_at: float


def version_directories(base: Path) -> dict[int, Path]:
    """{version: directory} of `base`'s integer-named directories; a version named twice
    ("2" and "0002") is left out, with a logged reason."""
    found: dict[int, list[Path]] = {}
    for path in sorted(base.iterdir()):
        if path.is_dir() and VERSION_NAME.fullmatch(path.name):
            found.setdefault(int(path.name), []).append(path)
    for version, paths in found.items():
        if len(paths) > 1:
            logger.warning(
                "skipping version %d: directories %s name the same version",
                version,
                ", ".join(p.name for p in paths),
            )
    return {version: paths[0] for version, paths in found.items() if len(paths) == 1}


class ServedModel:
    """Model `name`'s versions under `base_path`; serves the newest that loads.

    Construction loads it (the newest complete version; older ones if it fails) and raises
    FileNotFoundError when `base_path` has no version directory, ValueError when none loads.
    A version that failed to load is tried again by a later `poll()`, `retry_interval_s` after
    its first failure, then after twice as long at each failure, `max_load_retries` times.
    """

    def __init__(self, name, base_path, max_load_retries=5, retry_interval_s=10.0):
        self.name = name
        self.base_path = Path(base_path)
        self.max_load_retries = max_load_retries
        self.retry_interval_s = retry_interval_s
        self.versions: dict[int, Servable] = {}  # every version tried, in whatever state
        self._failed_loads: dict[int, FailedLoads] = {}
        self._serving: Servable | None = None
        self._lock = threading.Lock()
        self._poll_lock = threading.Lock()
        self._stop = threading.Event()
        self._poller = None
        if not self.base_path.is_dir() or not version_directories(self.base_path):
            raise FileNotFoundError(
                f"no version directory under {self.base_path} "
                f"(TensorFlow Serving's layout: {self.base_path}/1/saved_model.pb)"
            )
        self.poll(fall_back=True)
        if self._serving is None:
            reasons = "; ".join(
                f"version {s.version}: {s.error}" for s in self.versions.values() if s.error
            )
            raise ValueError(f"no version under {self.base_path} loads: {reasons}")

    @property
    def serving(self) -> Servable | None:
        return self._serving

    @property
    def version(self) -> int:
        return self._serving.version

    @property
    def signatures(self):
        return self._serving.signatures

    @property
    def warmup_requests(self) -> int:
        return self._serving.warmup_requests

    def poll(self, fall_back=False):
        """Loads the newest complete version not tried yet if it is newer than the one served
        (or, with `fall_back`, the newest that loads), then unloads the one it replaces."""
        with self._poll_lock:
            current = self._serving.version if self._serving else -1
            directories = version_directories(self.base_path) if self.base_path.is_dir() else {}
            for version in sorted(directories, reverse=True):
                if version <= current:
                    return
                if version in self.versions and not self._retry_due(version):
                    continue  # failed: END until its retry is due, or for good
                reason = incomplete(directories[version])
                if reason:
                    logger.warning("skipping version %d of %s: %s", version, self.name, reason)
                    continue
                if self._load(Servable(self.name, version, directories[version])):
                    return
                if not fall_back:
                    return

    def _retry_due(self, version: int) -> bool:
        failed = self._failed_loads.get(version)
        return failed is not None and time.monotonic() >= failed.retry_at

    def _load(self, servable: Servable) -> bool:
        with self._lock:
            self.versions[servable.version] = servable
        try:
            servable.load()
        except Exception as error:  # a corrupt export must not stop the server
            servable.state, servable.error = END, f"{type(error).__name__}: {error}"
            logger.error(
                "version %d of %s failed to load, %s; %s: %s",
                servable.version,
                self.name,
                "keeping the one served" if self._serving else "none served",
                self._schedule_retry(servable.version),
                servable.error,
            )
            return False
        self._failed_loads.pop(servable.version, None)
        with self._lock:
            previous, self._serving = self._serving, servable
        if previous is not None:
            previous.unload()
        return True

    def _schedule_retry(self, version: int) -> str:
        """Counts a failed load of `version` and sets when to try it again; says when."""
        count = self._failed_loads[version].count + 1 if version in self._failed_loads else 1
        if count > self.max_load_retries:
            self._failed_loads[version] = FailedLoads(count, float("inf"))
            return f"giving up after {count} loads"
        delay = self.retry_interval_s * 2 ** (count - 1)
        self._failed_loads[version] = FailedLoads(count, time.monotonic() + delay)
        return f"retrying in {delay:g} s ({count} of {self.max_load_retries} retries)"

    def start_polling(self, seconds: float):
        """Polls the base path every `seconds` in a daemon thread until `stop_polling()`."""

        def loop():
            while not self._stop.wait(seconds):
                try:
                    self.poll()
                except OSError as error:  # the base path went away for a while: keep serving
                    logger.warning("cannot read %s: %s", self.base_path, error)

        self._poller = threading.Thread(target=loop, name="version-poller", daemon=True)
        self._poller.start()

    def stop_polling(self):
        self._stop.set()
        if self._poller is not None:
            self._poller.join()

    def acquire(self, version=None, label=None) -> Servable:
        """The servable a request names (None: the one served), held until `release()`d."""
        self.check_label(label)
        with self._lock:
            servable = self._serving if version is None else self.versions.get(version)
            if servable is None or servable.state != AVAILABLE:
                if version is None:
                    raise unavailable(f"no version of {self.name} is available yet")
                raise not_found(f"Servable not found for request: Specific({self.name}, {version})")
            servable.acquire()
        return servable

    def check_label(self, label):
        if label:
            raise not_found(
                f"Servable not found for request: Labeled({self.name}, {label}): "
                "no version labels are assigned"
            )

    def check_name(self, name):
        if name != self.name:
            raise not_found(f"Servable not found for request: {name}")

    def status(self, version=None) -> list[Servable]:
        """The versions a status request asks about, newest first."""
        with self._lock:
            if version is None:
                return sorted(self.versions.values(), key=lambda s: -s.version)
            if version not in self.versions:
                raise not_found(f"Servable not found for request: Specific({self.name}, {version})")
            return [self.versions[version]]
