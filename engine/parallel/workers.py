"""Rank 0's tensor-parallel worker processes: start, feed each step, stop, and never leak.

`WorkerPool.start` launches ranks 1..N-1 as `python -m engine.parallel.worker` processes (a
fresh interpreter each, so the user's script is never re-imported) and waits until each has
loaded its shard, failing fast with the worker's error when one dies or reports one. `send`
gives every worker the step rank 0 is about to run. `close` asks them to stop and kills any
that do not within `STOP_SECONDS`; it also runs when the pool is garbage collected or the
interpreter exits. `kill` stops them at once (after a failed step they may be stuck in a
collective). A closed pool refuses `send` (WorkerError), and so does a pool with a worker
that died (WorkerError naming its rank, pid and status: `first_exited`). A worker also dies
with its parent (a crash or SIGKILL of rank 0): it has PR_SET_PDEATHSIG, watches its parent
pid, and exits at the end of its stdin.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import time
import weakref
from typing import Callable, Sequence

from engine.parallel.setup import WorkerSetup
from engine.step_inputs import StepInputs

STOP_SECONDS = 5.0
POLL_SECONDS = 0.05


class WorkerError(RuntimeError):
    """A tensor-parallel worker failed to start or died."""


def _reap(procs: Sequence[subprocess.Popen], graceful: bool = True) -> None:
    """Stop every worker: None on stdin (when `graceful`), then SIGKILL what is left after
    STOP_SECONDS (at once when not `graceful`)."""
    for proc in procs:
        try:
            if graceful and proc.poll() is None:
                pickle.dump(None, proc.stdin)
                proc.stdin.flush()
            proc.stdin.close()
        except (OSError, ValueError):
            pass
    deadline = time.monotonic() + (STOP_SECONDS if graceful else 0.0)
    for proc in procs:
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class WorkerPool:
    """One node's worker ranks of an engine: on node 0 ranks 1..world-1 (rank 0 is the
    engine's own process), on another node all of that node's ranks."""

    def __init__(self, setups: Sequence[WorkerSetup]) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        self.ranks = [setup.rank for setup in setups]
        self.procs = [subprocess.Popen([sys.executable, "-m", "engine.parallel.worker"],
                                       stdin=subprocess.PIPE, env=env, start_new_session=True)
                      for _ in setups]
        self._finalizer = weakref.finalize(self, _reap, list(self.procs))
        self._stopped = False
        for proc, setup in zip(self.procs, setups):
            self._write(proc, setup)

    @property
    def pids(self) -> list[int]:
        return [proc.pid for proc in self.procs]

    def wait_for(self, key: str, has_key: Callable[[str], bool], timeout: float) -> None:
        """Block until every worker rank r has set `<key>/<r>` in the store (`has_key`);
        WorkerError if one exits first or `timeout` seconds pass."""
        deadline = time.monotonic() + timeout
        for rank, proc in zip(self.ranks, self.procs):
            while not has_key(f"{key}/{rank}"):
                if proc.poll() is not None:
                    raise WorkerError(f"tensor-parallel worker rank {rank} exited with status "
                                      f"{proc.returncode} before '{key}'")
                if time.monotonic() > deadline:
                    raise WorkerError(f"tensor-parallel worker rank {rank}: no '{key}' after "
                                      f"{timeout:g} s")
                time.sleep(POLL_SECONDS)

    def send(self, step: StepInputs) -> None:
        """Give every worker `step`; WorkerError if the pool is stopped or a worker died."""
        if self._stopped:
            raise WorkerError("tensor-parallel workers are stopped (the engine was closed or "
                              "a step failed); start a new engine")
        dead = self.first_exited(0.0)
        if dead is not None:
            raise WorkerError(dead)
        for proc in self.procs:
            self._write(proc, step)

    def first_exited(self, within: float) -> str | None:
        """Who of the workers has exited, waiting up to `within` seconds for one to (a
        worker that just broke a collective may not be reaped yet): "tensor-parallel worker
        rank R (pid P) exited with status S" for the first found, None if all still run."""
        deadline = time.monotonic() + within
        while True:
            for rank, proc in zip(self.ranks, self.procs):
                if proc.poll() is not None:
                    return (f"tensor-parallel worker rank {rank} (pid {proc.pid}) exited with "
                            f"status {proc.returncode}")
            if time.monotonic() >= deadline:
                return None
            time.sleep(POLL_SECONDS)

    def _write(self, proc: subprocess.Popen, message: object) -> None:
        try:
            pickle.dump(message, proc.stdin, protocol=pickle.HIGHEST_PROTOCOL)
            proc.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            raise WorkerError(self.first_exited(STOP_SECONDS)
                              or f"tensor-parallel worker pid {proc.pid}: its stdin broke"
                              ) from exc

    def close(self) -> None:
        """Stop every worker, gracefully (idempotent)."""
        self._stopped = True
        self._finalizer()

    def kill(self) -> None:
        """Stop every worker at once (idempotent)."""
        self._stopped = True
        if self._finalizer.detach() is not None:
            _reap(self.procs, graceful=False)
