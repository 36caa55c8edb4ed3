"""The server's Prometheus metrics, served at TF Serving's path
`/monitoring/prometheus/metrics` on the REST port: requests by API and status, their latency,
batch sizes, queue depth, and queued requests dropped (deadline passed or client gone)."""

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

METRICS_PATH = "/monitoring/prometheus/metrics"

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)


class ServingMetrics:
    """One server's metrics, in a registry of its own (servers in one process stay apart)."""

    def __init__(self):
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "keras_transformer_serving_requests",
            "Requests answered, by API (rest, grpc) and status (gRPC code name)",
            ["api", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "keras_transformer_serving_request_latency_seconds",
            "Seconds from a request's arrival to its answer, by API",
            ["api"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.batch_size = Histogram(
            "keras_transformer_serving_batch_size",
            "Sentences decoded by one model call",
            buckets=BATCH_BUCKETS,
            registry=self.registry,
        )
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
