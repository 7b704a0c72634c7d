"""A model-free engine loop for scheduler tests: fake calls that generate one token per
decode step, token-mode service, a clock that advances one unit per step."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from kvcache.manager import KVCacheManager
from scheduler.call_state import CallStatus
from scheduler.config import SchedulerConfig
from scheduler.plan import SchedulePlan
from scheduler.policy import make_policy
from scheduler.scheduler import Scheduler


@dataclass(eq=False)
class FakeCall:
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

    def __post_init__(self) -> None:
        self.all_token_ids = [100 + (hash(self.call_id) + i) % 50 for i in range(self.prompt_len)]

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


class Sim:
    """Drives a real Scheduler and KVCacheManager without a model."""

    def __init__(self, policy: str = "fcfs", num_blocks: int = 1000, block_size: int = 4,
                 num_host_blocks: int = 0, **config) -> None:
        config.setdefault("service_mode", "tokens")
        self.kv = KVCacheManager(num_blocks, block_size, num_host_blocks)
        self.scheduler = Scheduler(SchedulerConfig(**config), self.kv, make_policy(policy))
        self.now = 0.0
        self.completed: list[str] = []
        self.plans: list[SchedulePlan] = []
        self.calls: dict[str, FakeCall] = {}
        self._index = itertools.count()

    def start(self, program_id: str) -> str:
        return self.scheduler.start_program(self.now, program_id)

    def call(self, program_id: str, call_id: str, prompt_len: int = 8, output_len: int = 4,
             thread_id: str | None = None) -> FakeCall:
        call = FakeCall(call_id, prompt_len, output_len, self.now, next(self._index))
        self.calls[call_id] = call
        self.scheduler.add(call, self.now, program_id, thread_id)
        return call

    def step(self) -> SchedulePlan:
        plan = self.scheduler.schedule(self.now)
        self.plans.append(plan)
        self.now += 1.0
        self.scheduler.charge(plan, 1.0)
        for chunk in plan.chunks:
            call = chunk.call
            call.num_computed_tokens = chunk.start + chunk.num_tokens
            if chunk.samples:
                call.all_token_ids.append(7)
                if call.num_remaining_tokens == 0:
                    self.scheduler.finish(call, self.now)
                    self.completed.append(call.call_id)
        return plan

    def run(self, max_steps: int = 10_000) -> None:
        for _ in range(max_steps):
            if not self.scheduler.num_unfinished:
                return
            self.step()
            self.scheduler.check_integrity()
        raise AssertionError("calls did not finish")

    def run_until(self, call_id: str, max_steps: int = 10_000) -> None:
        for _ in range(max_steps):
            if call_id in self.completed:
                return
            self.step()
        raise AssertionError(f"{call_id} did not finish")
