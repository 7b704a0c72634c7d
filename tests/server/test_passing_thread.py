"""Start-up work runs in a thread of its own that has ended when the caller goes on."""

import threading

import pytest

from server.passing_thread import in_passing_thread


def test_the_work_runs_in_another_thread_that_has_ended():
    seen: list[threading.Thread] = []

    def work() -> int:
        seen.append(threading.current_thread())
        return 7

    assert in_passing_thread(work, name="loader") == 7
    (thread,) = seen
    assert thread is not threading.current_thread() and thread.name == "loader"
    assert not thread.is_alive()


def test_what_the_work_raises_is_raised_to_the_caller():
    def work() -> None:
        raise ValueError("model: no such directory")

    before = threading.active_count()
    with pytest.raises(ValueError, match="model: no such directory"):
        in_passing_thread(work)
    assert threading.active_count() == before


def test_a_base_exception_is_raised_too():
    def work() -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        in_passing_thread(work)


def _loading_thread(monkeypatch, **config) -> threading.Thread:
    """The thread start_server loads its engine in (the load then raises, so nothing serves)."""
    from engine import EngineConfig
    from server import app

    loaded_in: list[threading.Thread] = []

    def engine(config):
        loaded_in.append(threading.current_thread())
        raise RuntimeError("stop before serving")

    monkeypatch.setattr(app, "LLMEngine", engine)
    with pytest.raises(RuntimeError, match="stop before serving"):
        app.start_server(EngineConfig(model="unused", **config), port=0)
    (thread,) = loaded_in
    return thread


def test_start_server_loads_the_engine_in_a_passing_thread(monkeypatch):
    thread = _loading_thread(monkeypatch)
    assert thread.name == "agentix-load" and thread is not threading.current_thread()
    assert not thread.is_alive()


def test_with_tensor_parallel_workers_the_engine_loads_in_the_calling_thread(monkeypatch):
    """A worker's parent-death signal fires when the thread that started it ends."""
    assert _loading_thread(monkeypatch, tensor_parallel_size=2) is threading.current_thread()
