"""The serving process freezes its start-up heap once the server is SERVING."""

import gc

import pytest

from engine import EngineConfig
from server import app
from server.app import ServeOptions, serve_forever
from server.startup_heap import freeze_startup_heap


@pytest.fixture
def unfrozen():
    gc.unfreeze()
    yield
    gc.unfreeze()


def test_freeze_startup_heap_freezes_what_is_alive(unfrozen):
    assert gc.get_freeze_count() == 0
    freeze_startup_heap()
    assert gc.get_freeze_count() > 0


class _Running:
    stopped = False

    def stop(self) -> None:
        self.stopped = True


class _Signals:
    """StopSignals without signals: serve hands the server to on_ready and returns."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        return None

    def serve(self, running, on_ready, grace) -> None:
        on_ready(running)
        running.stop()


def test_serve_forever_freezes_after_start_up_and_before_serving(monkeypatch, unfrozen):
    running = _Running()
    frozen_at_start: list[int] = []

    def start_server(config, options):
        frozen_at_start.append(gc.get_freeze_count())
        return running

    monkeypatch.setattr(app, "start_server", start_server)
    monkeypatch.setattr(app, "StopSignals", _Signals)
    frozen_when_ready: list[int] = []
    serve_forever(EngineConfig(model="unused"), ServeOptions(),
                  on_ready=lambda r: frozen_when_ready.append(gc.get_freeze_count()))
    assert frozen_at_start == [0]
    assert frozen_when_ready and frozen_when_ready[0] > 0
    assert running.stopped
