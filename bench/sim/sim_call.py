"""A call without a model, for the scheduler's tests and benchmarks (and the simulator):
it carries made-up prompt tokens and is done after `output_len` generated tokens."""

from __future__ import annotations

from dataclasses import dataclass, field

from scheduler.call_state import CallStatus


@dataclass(eq=False)
class SimCall:
    call_id: str
    prompt_len: int
    output_len: int
    arrival_time: float
    arrival_index: int
    status: CallStatus = CallStatus.WAITING
    num_computed_tokens: int = 0
    num_cached_tokens: int = 0
    num_preemptions: int = 0
    all_token_ids: list[int] = field(default_factory=list)
    takes_prefix_hits: bool = True

    def __post_init__(self) -> None:
        self.all_token_ids = [100 + (self.arrival_index + i) % 50 for i in range(self.prompt_len)]

    @property
    def num_prompt_tokens(self) -> int:
        return self.prompt_len

    @property
    def num_tokens(self) -> int:
        return len(self.all_token_ids)

    @property
    def num_generated(self) -> int:
        return self.num_tokens - self.prompt_len

    @property
    def num_remaining_tokens(self) -> int:
        return self.output_len - self.num_generated

    def append_token(self, token: int) -> str | None:
        self.all_token_ids.append(token)
        return "length" if self.num_remaining_tokens <= 0 else None
