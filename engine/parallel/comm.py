"""The collectives tensor parallelism needs, over one torch.distributed process group.

The group is built directly on a TCPStore (no `init_process_group`, so no process-global
state: several engines may each hold their own group in one process). gloo on CPU, NCCL on
CUDA. Every rank must call the same collectives in the same order.
"""

from __future__ import annotations

import datetime

import torch
import torch.distributed as dist

TIMEOUT_SECONDS = 120.0   # how long a rank waits for the others (rendezvous or collective)


def _timeout() -> datetime.timedelta:
    return datetime.timedelta(seconds=TIMEOUT_SECONDS)


def listen_store(host: str, world: int, port: int = 0) -> dist.TCPStore:
    """Rank 0's store on `host:port` (0: a free port; the workers connect to its `.port`)."""
    return dist.TCPStore(host, port, world, True, timeout=_timeout(), wait_for_workers=False)


def connect_store(host: str, port: int, world: int) -> dist.TCPStore:
    """A worker's connection to rank 0's store."""
    return dist.TCPStore(host, port, world, False, timeout=_timeout())


class Communicator:
    """All-reduce and all-gather among the `world` ranks of one tensor-parallel group.
    Constructing it is itself collective: it returns once every rank has joined."""

    def __init__(self, store: dist.Store, rank: int, world: int, device: torch.device) -> None:
        self.rank, self.world = rank, world
        self.store = store   # kept alive as long as the group
        prefixed = dist.PrefixStore("agentix-tp", store)
        if device.type == "cuda":
            self.group = dist.ProcessGroupNCCL(prefixed, rank, world)
        else:
            self.group = dist.ProcessGroupGloo(prefixed, rank, world, _timeout())

    def all_reduce(self, tensor: torch.Tensor) -> torch.Tensor:
        """Sum `tensor` over ranks, in place; returns it."""
        self.group.allreduce([tensor]).wait()
        return tensor

    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        """Every rank's `tensor` (same shape), concatenated along the last dim in rank order."""
        parts = [torch.empty_like(tensor) for _ in range(self.world)]
        self.group.allgather([parts], [tensor.contiguous()]).wait()
        return torch.cat(parts, dim=-1)
