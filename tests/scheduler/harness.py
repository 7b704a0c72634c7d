"""A model-free engine loop for scheduler tests: SimCalls that generate one token per
decode step, token-mode service, a clock that advances one unit per step. Unless a test says
otherwise: FCFS, no prefix cache, recompute preemption, no first-token deadline and a
scheduling round every step (multistep 1) (not the engine's defaults: the exact orders the
tests assert are those of this plain scheduler)."""

from __future__ import annotations

import itertools

from bench.sim.sim_call import SimCall
from kvcache.manager import KVCacheManager
from scheduler.config import SchedulerConfig
from scheduler.plan import SchedulePlan
from scheduler.policies import make_policy
from scheduler.scheduler import Scheduler


class Sim:
    """Drives a real Scheduler and KVCacheManager without a model."""

    def __init__(self, policy: str = "fcfs", num_blocks: int = 1000, block_size: int = 4,
                 num_host_blocks: int = 0, prefix_caching: bool = False, **config) -> None:
        config = {"service_mode": "tokens", "preemption_mode": "recompute",
                  "ttft_slo_tokens": None, "multistep": 1, **config}
        self.kv = KVCacheManager(num_blocks, block_size, num_host_blocks, prefix_caching)
        self.scheduler = Scheduler(SchedulerConfig(**config), self.kv, make_policy(policy))
        self.now = 0.0
        self.completed: list[str] = []
        self.plans: list[SchedulePlan] = []
        self.calls: dict[str, SimCall] = {}
        self._index = itertools.count()

    def start(self, program_id: str, tenant: str | None = None) -> str:
        return self.scheduler.start_program(self.now, program_id, tenant)

    def call(self, program_id: str, call_id: str, prompt_len: int = 8, output_len: int = 4,
             thread_id: str | None = None, expected_tool_seconds: float | None = None,
             token_ids: list[int] | None = None) -> SimCall:
        """Queue a SimCall (prompt `token_ids` if given, of length `prompt_len`)."""
        call = SimCall(call_id, prompt_len, output_len, self.now, next(self._index))
        if token_ids is not None:
            call.all_token_ids = list(token_ids)
        self.calls[call_id] = call
        self.scheduler.add(call, self.now, program_id, thread_id, expected_tool_seconds)
        return call

    def step(self) -> SchedulePlan:
        """One step: every sampling chunk samples token 7; calls stop at their length."""
        plan = self.scheduler.schedule(self.now)
        self.plans.append(plan)
        self.now += 1.0
        tokens = [7 if chunk.samples else None for chunk in plan.chunks]
        for sampled in self.scheduler.update(plan, tokens, self.now):
            if sampled.finish_reason is not None:
                self.completed.append(sampled.call.call_id)
        return plan

    def run(self, max_steps: int = 10_000) -> None:
        for _ in range(max_steps):
            if not self.scheduler.num_unfinished:
                return
            self.step()
            self.scheduler.check_integrity()
        raise AssertionError("calls did not finish")

    def run_clean(self) -> None:
        """Run to the end; nothing may leak: every device block free, host blocks free or
        cached."""
        self.run()
        self.scheduler.check_integrity()
        assert self.kv.num_free_blocks == self.kv.pool.num_usable
        assert self.kv.num_free_host_blocks == self.kv.host_pool.num_blocks

    def run_until(self, call_id: str, max_steps: int = 10_000) -> None:
        for _ in range(max_steps):
            if call_id in self.completed:
                return
            self.step()
        raise AssertionError(f"{call_id} did not finish")
