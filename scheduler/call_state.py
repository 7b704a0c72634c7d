"""What the scheduler needs to know about a call, without knowing the engine's Call class."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol

from scheduler.process_table import CallRecord


class CallStatus(enum.Enum):
    WAITING = "waiting"      # queued; holds no KV blocks (or only a prefix hit being set up)
    RUNNING = "running"      # holds device KV blocks for its computed tokens
    SWAPPED = "swapped"      # preempted; its KV lives in the host pool
    FINISHED = "finished"    # done; all blocks released


class SchedulableCall(Protocol):
    """A call as the scheduler sees it. `all_token_ids` is prompt + generated so far;
    `num_computed_tokens` of them have their K/V in the cache. The scheduler sets `status`,
    `num_computed_tokens` (on admission, preemption and after each step), `num_cached_tokens`
    (prefix hits) and `num_preemptions`, and hands it each sampled token (`append_token`,
    from `Scheduler.update`), which tells it when the token ends the call."""

    call_id: str
    status: CallStatus
    num_computed_tokens: int
    num_cached_tokens: int
    num_preemptions: int
    all_token_ids: list[int]

    @property
    def num_tokens(self) -> int: ...

    @property
    def num_prompt_tokens(self) -> int: ...

    @property
    def takes_prefix_hits(self) -> bool:
        """Whether its admission may adopt prefix-cache hits (else it computes all its
        tokens; its blocks still go to the cache)."""
        ...

    @property
    def num_remaining_tokens(self) -> int:
        """Tokens the call may still generate before a length limit stops it."""
        ...

    def append_token(self, token: int) -> str | None:
        """Append a sampled `token` to `all_token_ids`; why the call ends with it (a stop
        token, a length limit, its output grammar complete), or None if it goes on."""
        ...


@dataclass(slots=True)
class SampledToken:
    """A token `Scheduler.update` appended to `call`. When the call ended with it,
    `finish_reason` says why and `record` is its final CallRecord (service, wait). Read-only
    once made (not frozen only because a frozen dataclass is slow to build, and one is built
    per sampled token)."""

    call: SchedulableCall
    token: int
    finish_reason: str | None = None
    record: CallRecord | None = None
