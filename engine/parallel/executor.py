"""The executor of an engine with `tensor_parallel_size` N > 1 (rank 0's side).

It starts ranks 1..N-1 (`WorkerPool`), joins them in one communicator, and holds rank 0's own
`ModelRunner` shard. Each step it flattens the plan once (`StepInputs`), sends it to every
worker, and runs it on rank 0; the ranks meet in the layers' collectives, and rank 0 samples
from the gathered logits. Every rank builds the same KV cache spec (its share of the KV heads,
the same number of blocks: `engine.kv_spec`), so the scheduler's block ids (and its swap
copies) mean the same on every rank. A worker that died, or any error in a step, breaks the
executor for good (the engine cannot go on with ranks out of step): it kills its workers, tells
the other nodes' agents to stop, and raises EngineBrokenError naming the dead worker (or the
error), as does every later step, at once. With `nnodes` > 1 the store listens on
`dist_init_addr`, this node starts only its own ranks, and the steps reach the other nodes'
ranks through their agents (`engine.parallel.nodes`).
On CPU each rank gets torch's thread count divided by N (rank 0's own count is set too).
"""

from __future__ import annotations

import os

import torch

from engine.config import EngineConfig
from engine.errors import EngineBrokenError
from engine.executor import StepResult
from engine.loader import ModelFiles
from engine.model_runner import ModelRunner, rank_device
from engine.parallel.comm import TIMEOUT_SECONDS, Communicator, listen_store
from engine.parallel.layout import check_split
from engine.parallel.nodes import (EngineBroken, NodeRelay, node_ranks, parse_dist_addr,
                                   publish_setup)
from engine.parallel.setup import WorkerSetup
from engine.parallel.workers import WorkerError, WorkerPool
from engine.step_inputs import StepInputs
from kvcache.kv_tensor import KVCacheSpec
from scheduler.plan import SchedulePlan

HOST = "127.0.0.1"
# After a failed step: how long to wait for a worker to be seen exited (one that broke the
# step's collective by dying may not be reaped yet), to name it as the cause.
DEATH_SECONDS = 1.0


class TensorParallelExecutor:
    def __init__(self, config: EngineConfig, files: ModelFiles, max_model_len: int) -> None:
        world = config.tensor_parallel_size
        check_split(files.args, world)
        device = rank_device(config.device, 0)
        if device.type == "cuda" and device.index + world > torch.cuda.device_count():
            raise ValueError(f"tensor_parallel_size {world} from {config.device} needs "
                             f"{device.index + world} CUDA devices, "
                             f"{torch.cuda.device_count()} present")
        threads = torch.get_num_threads()
        if device.type == "cpu":
            threads = max(1, threads // world)
            torch.set_num_threads(threads)
        host, port = parse_dist_addr(config.dist_init_addr) if config.nnodes > 1 else (HOST, 0)
        store = listen_store(host, world, port)
        publish_setup(store, config, max_model_len)
        local = node_ranks(world, config.nnodes, 0)
        self.pool = WorkerPool([
            WorkerSetup(config, rank, world, host, store.port, max_model_len, threads,
                        os.getpid(), local_rank=rank) for rank in local[1:]])
        self.relay: NodeRelay | None = None
        self._broken: str | None = None  # why no step can run any more
        try:
            if config.nnodes > 1:
                self.relay = NodeRelay(store, 0, config.nnodes)  # every node's agent joined
            self.pool.wait_for("joined", lambda key: store.check([key]), TIMEOUT_SECONDS)
            comm = Communicator(store, 0, world, device)  # every rank joined
            self.runner = ModelRunner(config, files, max_model_len, comm=comm)
            self.pool.wait_for("status", lambda key: store.check([key]), TIMEOUT_SECONDS)
            for rank in range(1, world):
                status = store.get(f"status/{rank}").decode()  # waits for remote ranks
                if status != "ready":
                    raise WorkerError(f"tensor-parallel worker rank {rank}: {status}")
        except BaseException:
            self.pool.kill()
            raise

    @property
    def kv_spec(self) -> KVCacheSpec:
        """Each rank's KV cache (all alike)."""
        return self.runner.kv_spec

    @property
    def worker_pids(self) -> list[int]:
        return self.pool.pids

    def execute(self, plan: SchedulePlan) -> StepResult:
        """Run `plan` on every rank; EngineBrokenError (from the error) if a worker died or
        the step failed, and at once once broken."""
        if self._broken is not None:
            raise EngineBrokenError(self._broken)
        step = StepInputs.of(plan, self.runner.block_size)
        try:
            self.pool.send(step)
            if self.relay is not None:
                self.relay.send(step)
            return self.runner.run(step, plan)
        except Exception as exc:
            raise EngineBrokenError(self._break(exc)) from exc
        except BaseException as exc:
            self._break(exc)
            raise

    def _break(self, cause: BaseException) -> str:
        """Stop every rank after a failed step (some may be stuck in a collective) and stay
        broken; returns why: the first local worker found dead, else `cause`."""
        dead = self.pool.first_exited(DEATH_SECONDS)
        self._broken = dead or f"tensor-parallel step failed ({type(cause).__name__}: {cause})"
        self.pool.kill()
        self._stop_nodes(EngineBroken(self._broken))
        return self._broken

    def _stop_nodes(self, message: EngineBroken | None) -> None:
        """Tell the other nodes' agents to stop (None: the engine closed), once; a relay that
        broke (a node is gone) is dropped, which closes its connections."""
        relay, self.relay = self.relay, None
        if relay is not None:
            try:
                relay.send(message)
            except RuntimeError:
                pass

    def close(self) -> None:
        """Stop the workers, and the other nodes' (idempotent); the executor cannot run
        steps afterwards."""
        self.runner.close()
        self.pool.close()
        self._stop_nodes(None)
