"""The scheduler's output for one engine step: what runs and which KV blocks move."""

from __future__ import annotations

from dataclasses import dataclass, field

from scheduler.call_state import SchedulableCall
from scheduler.preemption import PreemptionKind


@dataclass(slots=True)
class ScheduledChunk:
    """Run `num_tokens` tokens of `call` starting at token `start` (its computed count).

    `block_table` covers at least `start + num_tokens` tokens. A chunk that reaches the call's
    last token (as planned) samples the next one (`samples`); a partial prefill chunk does not.
    Read-only once planned (not frozen only because a frozen dataclass is slow to build, and
    the scheduler builds hundreds per step).
    """

    call: SchedulableCall
    start: int
    num_tokens: int
    block_table: list[int]
    samples: bool

    @property
    def is_decode(self) -> bool:
        return self.num_tokens == 1 and self.samples


@dataclass
class SchedulePlan:
    """Built up by the scheduler during one step, read-only afterwards.

    Chunks are ordered decodes first, then prefill chunks. The executor copies `swap_out`
    pairs (device, host) first, then `swap_in` pairs (host, device), then runs the chunks.
    `created_at` is the clock reading the step was planned at; `preempted` maps each call
    preempted this step to what was done with its KV; `swapped` names the calls whose KV
    moved between tiers whole (swap-out or swap-in; prefix offloads and fetches are in the copy
    lists but name no call); `is_continuation` marks a multistep step that reused the last
    round.
    """

    created_at: float
    chunks: list[ScheduledChunk] = field(default_factory=list)
    swap_out: list[tuple[int, int]] = field(default_factory=list)
    swap_in: list[tuple[int, int]] = field(default_factory=list)
    preempted: dict[str, PreemptionKind] = field(default_factory=dict)
    swapped: list[str] = field(default_factory=list)
    is_continuation: bool = False

    @property
    def is_empty(self) -> bool:
        return not self.chunks and not self.swap_out and not self.swap_in

    @property
    def num_batched_tokens(self) -> int:
        return sum(c.num_tokens for c in self.chunks)
