"""Every setting of a server, in one frozen `ServerSettings`: `keras-transformer serve`'s flags
are generated from its parts (one flag a field, named after it), and `ModelServer` takes it
whole, beside its `ModelManager` (the models, built from `ModelsToServe`). Each part is one
concern:

- `network`: address, ports, connections, bodies, timeouts, the page, the drain;
- `limits`: what one request may ask;
- `batching`: TF Serving's batching parameters;
- `libretranslate`: LibreTranslate's API, its keys, limits and rate-limit storage;
- `documents`: its document translation (`/translate_file`): what a file may hold, and how
  long its translation can be downloaded.

Example:
>>> ServerSettings(network=Network(rest_port=0, grpc_port=0)).network.max_body_bytes
4194304
"""

from dataclasses import dataclass, field

from keras_transformer.errors import ConfigError
from keras_transformer.server.apis.libretranslate import LibreTranslateSettings
from keras_transformer.server.documents.settings import DocumentSettings
from keras_transformer.server.models.batching import BatchingParameters
from keras_transformer.server.models.limits import Limits


@dataclass(frozen=True)
class Network:
    """Where and how the server listens; the `help` of each field documents it."""

    host: str = field(
        default="127.0.0.1", metadata={"help": "address to bind (127.0.0.1: this machine only)"}
    )
    rest_port: int = field(default=8501, metadata={"help": "HTTP port (0: any free port)"})
    grpc_port: int = field(default=8500, metadata={"help": "gRPC port (0: any free port)"})
    max_connections: int = field(
        default=2048,
        metadata={
            "help": "HTTP connections held at once, idle ones included (each costs a socket "
            "and a coroutine, not a thread); beyond, a request is answered 503"
        },
    )
    max_body_bytes: int = field(
        default=4 * 1024 * 1024,
        metadata={"help": "bytes of a request body (HTTP) or message (gRPC); beyond: 413"},
    )
    socket_timeout_s: float = field(
        default=30.0,
        metadata={
            "help": "how long an HTTP connection may wait for its client: idle between "
            "requests, or stalled mid-body (then answered 408 and closed)"
        },
    )
    rest_api_timeout_in_ms: int = field(
        default=30_000,
        metadata={"help": "an HTTP request's deadline (gRPC requests take their RPC's)"},
    )
    workers: int = field(
        default=64,
        metadata={"help": "threads that answer requests: gRPC's, and the HTTP APIs' model calls"},
    )
    drain_timeout_s: float = field(
        default=30.0,
        metadata={"help": "on SIGTERM or Ctrl-C, how long requests in flight may take"},
    )
    ui: bool = field(
        default=True,
        metadata={"help": "the web page at / and the API's at /docs", "negatable": True},
    )

    def __post_init__(self):
        for name in ("max_connections", "max_body_bytes", "rest_api_timeout_in_ms", "workers"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} {getattr(self, name)} is below 1")
        for name in ("socket_timeout_s", "drain_timeout_s"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name} {getattr(self, name)} is not above 0")


def _part(factory, help):
    return field(default_factory=factory, metadata={"help": help})


@dataclass(frozen=True)
class ServerSettings:
    """A server's settings, by concern; each part's `help` titles its group of flags."""

    network: Network = _part(Network, "network")
    limits: Limits = _part(Limits, "limits of one request")
    batching: BatchingParameters = _part(
        BatchingParameters, "batching (TF Serving's batching parameters)"
    )
    libretranslate: LibreTranslateSettings = _part(
        LibreTranslateSettings, "LibreTranslate API (docs/SERVING.md)"
    )
    documents: DocumentSettings = _part(
        DocumentSettings, "document translation, /translate_file (docs/DOCUMENTS.md)"
    )
