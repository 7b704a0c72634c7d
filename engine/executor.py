"""The executor contract shared by the real ModelRunner and the benchmark's simulator."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from scheduler.plan import SchedulePlan


@dataclass(frozen=True)
class StepResult:
    """`tokens[i]` holds the `plan.num_steps` tokens sampled for `plan.chunks[i]` (empty for
    a prefill chunk that does not reach its call's last token)."""

    tokens: list[list[int]]


class Executor(Protocol):
    def execute(self, plan: SchedulePlan) -> StepResult:
        """Make the plan's swap copies (out, then in), then run its chunks for
        `plan.num_steps` steps, feeding each step's sampled tokens to the next."""
        ...
