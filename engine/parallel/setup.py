"""What rank 0 tells a tensor-parallel worker when it starts it."""

from __future__ import annotations

from dataclasses import dataclass

from engine.config import EngineConfig


@dataclass(frozen=True)
class WorkerSetup:
    """Rank `rank` of `world` loads its shard of `config.model` with `max_model_len`
    positions, joins rank 0's store at `host:port` and uses `threads` torch threads, on its
    node's `local_rank`-th device from `config.device` (CUDA). It exits when process
    `parent_pid` is gone."""

    config: EngineConfig
    rank: int
    world: int
    host: str
    port: int
    max_model_len: int
    threads: int
    parent_pid: int
    local_rank: int
