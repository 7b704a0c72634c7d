"""EngineStats: one engine's live load and its counters since start, in one snapshot.

The server's `/metrics`, the `EngineStats` RPC, `agentix top` and the router all read this
one object, so they agree with each other and with `check_integrity()`'s pools.
"""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.load import SchedulerLoad


@dataclass
class EngineCounters:
    """Counters the engine advances as it steps (owned by one LLMEngine).

    Prompt tokens are counted when a call finishes, split into those its prefix-cache hit
    supplied (`cached`) and the rest (`computed`); swap bytes count every device/host copy
    of a step (whole-call swaps and host-tier offloads and fetches alike).
    """

    generation_tokens: int = 0
    prompt_tokens_computed: int = 0
    prompt_tokens_cached: int = 0
    swap_out_bytes: int = 0
    swap_in_bytes: int = 0


@dataclass(frozen=True)
class EngineStats:
    """Device blocks exclude the null block: `kv_blocks_total = free + cached + used`,
    where cached blocks are unowned but still hold a reusable prefix (evictable)."""

    load: SchedulerLoad
    kv_blocks_total: int
    kv_blocks_free: int
    kv_blocks_cached: int
    kv_blocks_used: int
    host_blocks_total: int
    host_blocks_used: int
    preemptions: dict[str, int]  # by mode: recompute, swap, keep
    promotions: int
    steps: int
    counters: EngineCounters
