"""`ModelServer.serve_until_signal`: it blocks until SIGTERM or SIGINT, drains, and restores
the handlers it replaced; signal handlers exist in the main thread only, so from another
thread it refuses with one clear error before changing anything."""

import os
import signal
import threading

import pytest

from keras_transformer.errors import KerasTransformerError
from keras_transformer.server.server import ModelServer, ServerThreadError


class DrainRecorder:
    """Stands in for a started server: what `serve_until_signal` asks of it is `drain`."""

    def __init__(self):
        self.drained = []

    def drain(self, timeout):
        self.drained.append(timeout)


def test_a_signal_drains_the_server_and_restores_the_handlers():
    server, before = DrainRecorder(), signal.getsignal(signal.SIGTERM)
    threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGTERM)).start()
    ModelServer.serve_until_signal(server, drain_timeout=7.0)
    assert server.drained == [7.0]
    assert signal.getsignal(signal.SIGTERM) is before


def test_from_another_thread_it_refuses_before_changing_anything():
    server, before, raised = DrainRecorder(), signal.getsignal(signal.SIGTERM), []

    def serve():
        with pytest.raises(ServerThreadError, match="only in the main thread") as refusal:
            ModelServer.serve_until_signal(server)
        raised.append(refusal.value)

    thread = threading.Thread(target=serve)
    thread.start()
    thread.join(timeout=60)
    assert isinstance(raised[0], KerasTransformerError)
    assert server.drained == [] and signal.getsignal(signal.SIGTERM) is before
