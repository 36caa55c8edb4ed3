"""The server's Prometheus metrics, served at TF Serving's path
`/monitoring/prometheus/metrics` on the REST port: requests by API, model and status, their
latency and batch sizes by model, the weight bytes of each model's versions, queue depth, and
queued requests dropped (deadline passed or client gone)."""

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily

METRICS_PATH = "/monitoring/prometheus/metrics"

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)


class ServingMetrics:
    """One server's metrics, in a registry of its own (servers in one process stay apart);
    `weight_bytes()` lists (model, version, bytes) of the versions served, read at each scrape."""

    def __init__(self, weight_bytes=list):
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "keras_transformer_serving_requests",
            "Requests answered, by API (rest, grpc, ...), model and status (gRPC code name)",
            ["api", "model", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "keras_transformer_serving_request_latency_seconds",
            "Seconds from a request's arrival to its answer, by API and model",
            ["api", "model"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.batch_size = Histogram(
            "keras_transformer_serving_batch_size",
            "Sentences decoded by one model call, by model",
            ["model"],
            buckets=BATCH_BUCKETS,
            registry=self.registry,
        )
        self.registry.register(WeightBytes(weight_bytes))
        self.queue_depth = Gauge(
            "keras_transformer_serving_queue_depth",
            "Requests waiting for a batch thread",
            registry=self.registry,
        )
        self.dropped = Counter(
            "keras_transformer_serving_dropped_requests",
            "Queued requests dropped uncomputed: deadline passed or client gone",
            registry=self.registry,
        )

    def exposition(self) -> bytes:
        """The Prometheus text format."""
        return generate_latest(self.registry)


class WeightBytes:
    """The gauge `keras_transformer_serving_model_weight_bytes{model, version}`, collected from
    `weight_bytes()` at each scrape, so that a version unloaded leaves no stale value."""

    def __init__(self, weight_bytes):
        self.weight_bytes = weight_bytes

    def describe(self):
        return [self._family()]

    def collect(self):
        family = self._family()
        for model, version, size in self.weight_bytes():
            family.add_metric([model, str(version)], size)
        return [family]

    @staticmethod
    def _family():
        return GaugeMetricFamily(
            "keras_transformer_serving_model_weight_bytes",
            "Bytes of the variables of each version served, by model and version",
            labels=["model", "version"],
        )
