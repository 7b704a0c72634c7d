"""The executor contract shared by the real ModelRunner and the benchmark's simulator."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from engine.logprobs import TokenLogprob
from scheduler.plan import SchedulePlan


@dataclass(frozen=True)
class StepResult:
    """`tokens[i]` is the token sampled for `plan.chunks[i]` (None for a prefill chunk that
    does not reach its call's last token); `swap_seconds` is the time the copies took;
    `logprobs[i]` its token's logprobs when its call asked for them (None: no call did);
    `prompt_logprobs[i]` the prompt-token logprobs `plan.chunks[i]` scored, continuing those
    its call has collected, in position order ([] for most chunks; None: no call asked)."""

    tokens: list[int | None]
    swap_seconds: float = 0.0
    logprobs: list[TokenLogprob | None] | None = None
    prompt_logprobs: list[list[TokenLogprob]] | None = None


class Executor(Protocol):
    def execute(self, plan: SchedulePlan) -> StepResult:
        """Make the plan's swap copies (out, then in), then run its chunks for one step."""
        ...
