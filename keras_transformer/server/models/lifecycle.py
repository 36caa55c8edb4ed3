"""TensorFlow Serving's model lifecycle over a base path, with its version policies.

`<base>/<version>/` directories are versions; the name is read as an integer as TF Serving
reads it ("0002" is version 2, in directory 0002; two directories of one version are both
skipped). The model config's `model_version_policy` says which versions are served: the N
newest that load (`latest`, N 1 by default), the `specific` versions named, or `all`. Each is
loaded (LOADING, its warm-up requests run), then served (AVAILABLE); a request that names no
version gets the newest AVAILABLE one, and a `version_labels` label names a version. A version
the policy no longer wants (a newer one replaced it, or the policy changed) is UNLOADING until
the requests in flight on it are answered, then END. `poll()` looks again, and
`start_polling(seconds)` does it in a thread. A version holding a TFLite export
(`layout.TFLITE_MODEL`) is served through LiteRT (`litert_servable`), any other as a SavedModel.
A version that is incomplete (no saved_model.pb or variables yet, as while it is being
copied) is skipped with a logged reason and looked at again at the next poll; one that fails
to load is END with its error, and the versions served keep serving (for `latest`, the next
older one is loaded in its place). As TF Serving retries
a failed load (`max_num_load_retries`), a failed version is loaded again at a later poll, after
a backoff that doubles at each failure (`retry_interval_s`, then twice that, ...), up to
`max_load_retries` times: a version copied in two steps, its files present before their
contents were whole, loads once the copy is complete.
"""

import logging
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from keras_transformer.server.errors import bad_request, not_found, unavailable
from keras_transformer.server.models.litert_servable import LiteRTServable
from keras_transformer.server.models.model_config import Latest, Specific, VersionPolicy
from keras_transformer.server.models.servable import (
    END,
    UNLOADING,
    Servable,
    incomplete,
    is_tflite_version,
)

logger = logging.getLogger(__name__)

VERSION_NAME = re.compile(r"[0-9]{1,18}")

LATEST = Latest()  # TF Serving's default policy: the newest version


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
    """Model `name`'s versions under `base_path`, served as `policy` says, with `labels`
    ({label: version}).

    Construction loads what the policy wants and, with `must_load`, raises FileNotFoundError
    when `base_path` has no version directory and ValueError when no version loads; without it
    the model waits for versions, which a later `poll()` loads. A version that failed to load is
    tried again by a later `poll()`, `retry_interval_s` after its first failure, then after
    twice as long at each failure, `max_load_retries` times.
    """

    def __init__(
        self,
        name,
        base_path,
        policy: VersionPolicy = LATEST,
        labels=None,
        max_load_retries=5,
        retry_interval_s=10.0,
        must_load=True,
    ):
        self.name = name
        self.base_path = Path(base_path)
        self.policy = policy
        self.labels: dict[str, int] = dict(labels or {})
        self.max_load_retries = max_load_retries
        self.retry_interval_s = retry_interval_s
        self.versions: dict[int, Servable] = {}  # every version tried, in whatever state
        self._available: dict[int, Servable] = {}
        self._failed_loads: dict[int, FailedLoads] = {}
        self._lock = threading.Lock()
        self._poll_lock = threading.Lock()
        self._stop = threading.Event()
        self._poller = None
        if must_load and (not self.base_path.is_dir() or not version_directories(self.base_path)):
            raise FileNotFoundError(
                f"no version directory under {self.base_path} "
                f"(TensorFlow Serving's layout: {self.base_path}/1/saved_model.pb)"
            )
        self.poll()
        if must_load and not self._available:
            reasons = "; ".join(
                f"version {s.version}: {s.error}" for s in self.versions.values() if s.error
            )
            raise ValueError(f"no version under {self.base_path} loads: {reasons or 'none wanted'}")

    @property
    def serving(self) -> Servable | None:
        """The newest AVAILABLE version: the one a request without a version gets."""
        with self._lock:
            return self._available[max(self._available)] if self._available else None

    @property
    def version(self) -> int:
        return self.serving.version

    @property
    def signatures(self):
        return self.serving.signatures

    @property
    def warmup_requests(self) -> int:
        return self.serving.warmup_requests

    def configure(self, policy: VersionPolicy, labels: dict[str, int]):
        """A new policy and labels (a reloaded model config), applied by polling at once."""
        with self._lock:
            self.policy, self.labels = policy, dict(labels)
        self.poll()

    def poll(self):
        """Loads the versions the policy wants that are not served yet, newest first (for
        `latest`, until N are served: a version that fails is replaced by the next older), then
        unloads those it no longer wants."""
        with self._poll_lock:
            directories = version_directories(self.base_path) if self.base_path.is_dir() else {}
            candidates = sorted(set(directories) | set(self._available), reverse=True)
            if isinstance(self.policy, Specific):
                candidates = [v for v in candidates if v in self.policy.versions]
            wanted = self.policy.num_versions if isinstance(self.policy, Latest) else None
            served = []
            for version in candidates:
                if len(served) == wanted:
                    break
                if version in self._available or self._try_load(version, directories.get(version)):
                    served.append(version)
            for version in sorted(set(self._available) - set(served)):
                self._unload(version)

    def _try_load(self, version: int, directory: Path | None) -> bool:
        if directory is None:
            return False
        if version in self._failed_loads and not self._retry_due(version):
            return False  # failed: END until its retry is due, or for good
        reason = incomplete(directory)
        if reason:
            logger.warning("skipping version %d of %s: %s", version, self.name, reason)
            return False
        kind = LiteRTServable if is_tflite_version(directory) else Servable
        return self._load(kind(self.name, version, directory))

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
                "keeping the ones served" if self._available else "none served",
                self._schedule_retry(servable.version),
                servable.error,
            )
            return False
        self._failed_loads.pop(servable.version, None)
        logger.info(
            "version %d of %s holds %.1f MiB of weights",
            servable.version,
            self.name,
            servable.weight_bytes / 2**20,
        )
        with self._lock:
            self._available[servable.version] = servable
        return True

    def _unload(self, version: int):
        """Routes no new request to `version`, then unloads it once its requests are answered."""
        with self._lock:
            servable = self._available.pop(version)
            servable.state = UNLOADING
        servable.unload()

    def unload_all(self):
        """Stops polling and unloads every version (the model was removed from the config)."""
        self.stop_polling()
        with self._poll_lock:
            for version in sorted(self._available):
                self._unload(version)

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

        self._poller = threading.Thread(target=loop, name=f"versions-{self.name}", daemon=True)
        self._poller.start()

    def stop_polling(self):
        self._stop.set()
        if self._poller is not None:
            self._poller.join()

    def labelled(self, label) -> int:
        """The version `label` names; TF Serving's error for a label the config does not have."""
        with self._lock:
            if label not in self.labels:
                raise bad_request(f"Unrecognized servable version label: {label}")
            return self.labels[label]

    def acquire(self, version=None, label=None) -> Servable:
        """The servable a request names (by version, by label, or neither: the newest), held
        until `release()`d."""
        if label:
            version = self.labelled(label)
        with self._lock:
            if version is None:
                if not self._available:
                    raise unavailable(f"no version of {self.name} is available yet")
                servable = self._available[max(self._available)]
            elif version in self._available:
                servable = self._available[version]
            else:
                raise not_found(f"Servable not found for request: Specific({self.name}, {version})")
            servable.acquire()
        return servable

    def labels_of(self, version: int) -> list[str]:
        with self._lock:
            return sorted(label for label, v in self.labels.items() if v == version)

    def status(self, version=None, label=None) -> list[Servable]:
        """The versions a status request asks about, newest first."""
        if label:
            version = self.labelled(label)
        with self._lock:
            if version is None:
                return sorted(self.versions.values(), key=lambda s: -s.version)
            if version not in self.versions:
                raise not_found(f"Servable not found for request: Specific({self.name}, {version})")
            return [self.versions[version]]
