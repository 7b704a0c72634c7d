"""A tensor-parallel worker process: `python -m engine.parallel.worker` (started by
`WorkerPool`, never by hand).

Protocol on stdin (pickle): one `WorkerSetup`, then one `StepInputs` per step, then None to
stop. The worker joins rank 0's store, sets `joined/<rank>`, builds its communicator (a
rendezvous), loads its shard and sets `status/<rank>` to "ready" (or "error: ..." before it
exits). Each step it runs the same `ModelRunner.forward` as rank 0 on its shard. It exits on
None, on end of stdin, on any error, and (Linux) when its parent dies.
"""

from __future__ import annotations

import ctypes
import os
import pickle
import signal
import sys
import threading
import time

PARENT_POLL_SECONDS = 1.0


def _die_with_parent(parent_pid: int) -> None:
    """SIGKILL this process when the parent dies (prctl on Linux; a polling thread too)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)   # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(PARENT_POLL_SECONDS)
        os._exit(1)

    threading.Thread(target=watch, daemon=True, name="parent-watch").start()


def serve(stdin) -> None:
    import torch

    from engine.loader import read_model_dir
    from engine.model_runner import ModelRunner, rank_device
    from engine.parallel.comm import Communicator, connect_store

    setup = pickle.load(stdin)
    _die_with_parent(setup.parent_pid)
    torch.set_num_threads(setup.threads)
    store = connect_store(setup.host, setup.port, setup.world)
    store.set(f"joined/{setup.rank}", "1")
    try:
        device = rank_device(setup.config.device, setup.local_rank)
        comm = Communicator(store, setup.rank, setup.world, device)
        runner = ModelRunner(setup.config, read_model_dir(setup.config.model),
                             setup.max_model_len, comm=comm)
    except Exception as exc:
        store.set(f"status/{setup.rank}", f"error: {type(exc).__name__}: {exc}")
        raise
    store.set(f"status/{setup.rank}", "ready")
    while True:
        try:
            step = pickle.load(stdin)
        except EOFError:
            return
        if step is None:
            return
        runner.forward(step)


if __name__ == "__main__":
    serve(sys.stdin.buffer)
