"""The executor of an engine with `tensor_parallel_size` N > 1 (rank 0's side).

It starts ranks 1..N-1 (`WorkerPool`), joins them in one communicator, and holds rank 0's own
`ModelRunner` shard. Each step it flattens the plan once (`StepInputs`), sends it to every
worker, and runs it on rank 0; the ranks meet in the layers' collectives, and rank 0 samples
from the gathered logits. Every rank builds the same KV cache spec (its share of the KV heads,
the same number of blocks: `engine.kv_spec`), so the scheduler's block ids (and its swap
copies) mean the same on every rank. Any error in a step stops the workers and is raised
again: the engine cannot go on with ranks out of step. With `nnodes` > 1 the store listens on
`dist_init_addr`, this node starts only its own ranks, and the steps reach the other nodes'
ranks through their agents (`engine.parallel.nodes`).
On CPU each rank gets torch's thread count divided by N (rank 0's own count is set too).
"""

from __future__ import annotations

import os

import torch

from engine.config import EngineConfig
from engine.executor import StepResult
from engine.loader import ModelFiles
from engine.model_runner import ModelRunner, rank_device
from engine.parallel.comm import TIMEOUT_SECONDS, Communicator, listen_store
from engine.parallel.layout import check_split
from engine.parallel.nodes import NodeRelay, node_ranks, parse_dist_addr, publish_setup
from engine.parallel.setup import WorkerSetup
from engine.parallel.workers import WorkerError, WorkerPool
from engine.step_inputs import StepInputs
from kvcache.kv_tensor import KVCacheSpec
from scheduler.plan import SchedulePlan

HOST = "127.0.0.1"


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
        step = StepInputs.of(plan, self.runner.block_size)
        try:
            self.pool.send(step)
            if self.relay is not None:
                self.relay.send(step)
            return self.runner.run(step, plan)
        except BaseException:
            self.pool.kill()
            self.relay = None  # broken: the other nodes stop when they see it
            raise

    def close(self) -> None:
        """Stop the workers, and the other nodes' (idempotent); the executor cannot run
        steps afterwards."""
        self.runner.close()
        self.pool.close()
        if self.relay is not None:
            relay, self.relay = self.relay, None
            relay.send(None)
