"""The models a server serves: their config, versions, batching queue, limits and metrics."""
