"""Local replica processes for `agentix serve --replicas N`: N `agentix serve` children on
loopback, each `--port 0` with the same model and engine flags and a router token shared
through a private temporary file (mode 0600, removed once every child serves), started
before the router in the parent process.

No child outlives the parent: `LocalReplicas` is a context manager whose exit (normal, an
exception, or after a signal) sends SIGTERM to every child, waits up to `stop_timeout`
seconds and then SIGKILLs what is left; and each child asks Linux to SIGKILL it when its
parent dies (PR_SET_PDEATHSIG, set in the child before anything else, with a check that the
parent is still the one that started it), which covers a SIGKILL of the parent. Children run
in sessions of their own, so a terminal's Ctrl-C reaches the parent only and the router
drains first.

    python -m server.router.child PARENT_PID serve ARGS...   # a child (what Popen runs)
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Sequence

READY_PREFIX = "agentix serving on "
START_TIMEOUT = 900.0  # a first start may convert the model once


class ReplicaStartError(RuntimeError):
    """A child exited or stayed silent before it printed its address."""


class LocalReplicas:
    """Start `count` children running `agentix serve SERVE_ARGS --host 127.0.0.1 --port 0
    --router-token-file F` (F holds a fresh random token, `token`); `addresses` are theirs
    once `start()` returns. `should_stop()` is polled while waiting (a signal arrived)."""

    def __init__(self, count: int, serve_args: Sequence[str],
                 should_stop: Callable[[], bool] = lambda: False,
                 start_timeout: float = START_TIMEOUT, stop_timeout: float = 15.0) -> None:
        if count < 1:
            raise ValueError(f"replicas: must be >= 1, got {count}")
        self.count = count
        self.serve_args = list(serve_args)
        self.should_stop = should_stop
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.token = secrets.token_hex(16)
        self.processes: list[subprocess.Popen] = []
        self.addresses: list[str] = []
        self._dir: tempfile.TemporaryDirectory | None = None
        self.token_file: Path | None = None

    def __enter__(self) -> LocalReplicas:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def start(self) -> list[str]:
        self._dir = tempfile.TemporaryDirectory(prefix="agentix-router-")
        self.token_file = Path(self._dir.name) / "router-token"
        fd = os.open(self.token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(self.token + "\n")
        args = [*self.serve_args, "--host", "127.0.0.1", "--port", "0",
                "--router-token-file", str(self.token_file)]
        found: list[list[str]] = []
        for _ in range(self.count):
            process = subprocess.Popen(
                [sys.executable, "-m", "server.router.child", str(os.getpid()), "serve", *args],
                stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, bufsize=1,
                start_new_session=True, cwd=os.getcwd())
            self.processes.append(process)
            box: list[str] = []
            found.append(box)
            threading.Thread(target=_read_stdout, args=(process, box), daemon=True,
                             name=f"agentix-replica-{len(self.processes) - 1}").start()
        deadline = time.monotonic() + self.start_timeout
        while not all(found):
            for i, process in enumerate(self.processes):
                if not found[i] and process.poll() is not None:
                    raise ReplicaStartError(f"replica {i} exited with status "
                                            f"{process.returncode} before serving")
            if self.should_stop():
                raise ReplicaStartError("stopped while the replicas were starting")
            if time.monotonic() > deadline:
                raise ReplicaStartError(f"the replicas did not serve within "
                                        f"{self.start_timeout:g} s")
            time.sleep(0.05)
        self.addresses = [box[0] for box in found]
        self._remove_token_file()  # every child read it before serving
        return self.addresses

    def _remove_token_file(self) -> None:
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None

    def pids(self) -> list[int]:
        return [p.pid for p in self.processes]

    def stop(self) -> None:
        """SIGTERM every child (they drain), wait, SIGKILL the rest. Idempotent."""
        for process in self.processes:
            if process.poll() is None:
                try:
                    os.kill(process.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + self.stop_timeout
        for process in self.processes:
            try:
                process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self._remove_token_file()


def _read_stdout(process: subprocess.Popen, box: list[str]) -> None:
    """Find the child's `agentix serving on ADDRESS` line, then keep its pipe drained."""
    for line in process.stdout:
        if not box and line.startswith(READY_PREFIX):
            box.append(line[len(READY_PREFIX):].strip())
