"""Waiting in tests for what another thread or process does, without a timed assertion."""

import time


def wait_until(condition, seconds=120):
    """Polls `condition()` until true; fails after `seconds` (a hang, not a speed)."""
    stop = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < stop, "timed out waiting"
        time.sleep(0.05)
