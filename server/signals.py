"""SIGINT / SIGTERM for a serving process: the first asks for a clean drain, a second ends
the process at once (status 1; `os._exit`, so no thread survives)."""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import Callable, Protocol, TypeVar


class Stoppable(Protocol):
    def stop(self) -> None: ...


S = TypeVar("S", bound=Stoppable)


class StopSignals:
    """A context manager (main thread only) that installs the two handlers and restores the
    previous ones on exit. `received` says whether a first signal came."""

    def __init__(self) -> None:
        self._signalled: list[int] = []  # the handler only appends or exits: safe anywhere
        self._previous: dict[int, object] = {}

    @property
    def received(self) -> bool:
        return bool(self._signalled)

    def _on_signal(self, signum: int, _frame) -> None:
        if self._signalled:
            os.write(2, b"agentix: second signal: exiting now\n")
            os._exit(1)
        self._signalled.append(signum)

    def __enter__(self) -> StopSignals:
        self._previous = {sig: signal.signal(sig, self._on_signal)
                          for sig in (signal.SIGINT, signal.SIGTERM)}
        return self

    def __exit__(self, *exc_info: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def wait(self, grace: float) -> None:
        """Block until the first signal, then say on stderr that draining starts."""
        while not self.received:
            time.sleep(0.1)
        print(f"agentix: draining (grace {grace:g} s); signal again to exit now",
              file=sys.stderr, flush=True)

    def serve(self, running: S, on_ready: Callable[[S], None] | None, grace: float) -> None:
        """Hand `running` to `on_ready`, wait for the first signal, then stop it (also when
        `on_ready` raises)."""
        try:
            if on_ready is not None:
                on_ready(running)
            self.wait(grace)
        finally:
            running.stop()
