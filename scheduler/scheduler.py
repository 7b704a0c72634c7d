"""Batch formation: continuous batching with chunked prefill, prefix-cache hits,
preemption on memory pressure (recompute or bulk swap) and multistep decoding.

Each round walks three groups in policy order: running calls (who may preempt lower-priority
running calls when blocks run out), then swapped calls (swapped back in when space allows),
then waiting calls. The KV cache manager owns all block bookkeeping; this module decides
which blocks move and records the copies the executor must make in the plan.
"""

from __future__ import annotations

from kvcache.manager import KVCacheManager
from scheduler.call_state import CallStatus, SchedulableCall
from scheduler.config import SchedulerConfig
from scheduler.plan import SchedulePlan, ScheduledChunk
from scheduler.policy import Policy


class Scheduler:
    """Owns the waiting, running and swapped calls. Contract: every RUNNING call holds device
    blocks for its computed tokens; SWAPPED calls hold host blocks only; WAITING calls hold
    none between rounds; a finished call holds nothing."""

    def __init__(self, config: SchedulerConfig, kv: KVCacheManager, policy: Policy) -> None:
        self.config = config
        self.kv = kv
        self.policy = policy
        self.waiting: list[SchedulableCall] = []
        self.running: list[SchedulableCall] = []
        self.swapped: list[SchedulableCall] = []
        self.num_preemptions = 0
        self.num_swap_outs = 0
        self.num_swap_ins = 0

    # ----- membership -------------------------------------------------------------------
    def add(self, call: SchedulableCall, now: float) -> None:
        call.status = CallStatus.WAITING
        self.waiting.append(call)
        self.policy.on_arrival(call, now)

    def finish(self, call: SchedulableCall, now: float) -> None:
        """Remove `call` from whichever group holds it and release all its blocks."""
        for group in (self.running, self.waiting, self.swapped):
            if call in group:
                group.remove(call)
        self.kv.free(call.call_id)
        call.status = CallStatus.FINISHED
        self.policy.on_complete(call, now)

    def charge(self, plan: SchedulePlan, seconds: float, now: float, by_tokens: bool) -> None:
        """Charge each call that ran in `plan` its service: the step time, or its tokens."""
        for chunk in plan.chunks:
            if chunk.call.status is not CallStatus.FINISHED:
                service = chunk.num_tokens + plan.num_steps - 1 if by_tokens else seconds
                self.policy.on_service(chunk.call, service, now)

    @property
    def num_unfinished(self) -> int:
        return len(self.waiting) + len(self.running) + len(self.swapped)

    # ----- one round --------------------------------------------------------------------
    def schedule(self, now: float) -> SchedulePlan:
        plan = SchedulePlan(created_at=now)
        budget = self.config.max_num_batched_tokens
        key = self.policy.priority
        queue = sorted(self.running, key=key)
        kept: list[SchedulableCall] = []
        while queue and budget > 0:
            call = queue.pop(0)
            n = min(call.num_tokens - call.num_computed_tokens, budget)
            while not self.kv.allocate(call.call_id, call.num_computed_tokens + n):
                victim = queue.pop() if queue else call
                self._preempt(victim, plan)
                if victim is call:
                    break
            else:
                plan.chunks.append(self._chunk(call, n))
                kept.append(call)
                budget -= n
        self.running = kept + queue
        if not plan.preempted:
            budget = self._admit_swapped(plan, budget)
            self._admit_waiting(plan, budget)
        self._order_and_extend(plan)
        return plan

    def _admit_swapped(self, plan: SchedulePlan, budget: int) -> int:
        """Swap calls back in, in priority order, while their blocks fit on the device."""
        for call in sorted(self.swapped, key=self.policy.priority):
            if budget <= 0 or len(self.running) >= self.config.max_num_seqs:
                break
            n = min(call.num_tokens - call.num_computed_tokens, budget)
            need = -(-(call.num_computed_tokens + n) // self.kv.block_size)
            if need > self.kv.num_free_blocks:
                break
            pairs = self.kv.swap_in([call.call_id])
            if pairs is None or not self.kv.allocate(call.call_id, call.num_computed_tokens + n):
                raise RuntimeError(f"swap-in of {call.call_id} failed after a space check")
            plan.swap_in.extend(pairs)
            self.num_swap_ins += 1
            self.swapped.remove(call)
            self._start_running(call, n, plan)
            budget -= n
        return budget

    def _admit_waiting(self, plan: SchedulePlan, budget: int) -> None:
        for call in sorted(self.waiting, key=self.policy.priority):
            if budget <= 0 or len(self.running) >= self.config.max_num_seqs:
                return
            if call.num_computed_tokens == 0:
                call.num_cached_tokens = self.kv.match_prefix(call.call_id, call.all_token_ids)
                call.num_computed_tokens = call.num_cached_tokens
            remaining = call.num_tokens - call.num_computed_tokens
            if remaining > budget and not self.config.enable_chunked_prefill:
                self._release_waiting(call)
                return
            n = min(remaining, budget)
            if not self.kv.allocate(call.call_id, call.num_computed_tokens + n):
                self._release_waiting(call)
                return
            self.waiting.remove(call)
            self._start_running(call, n, plan)
            budget -= n

    def _start_running(self, call: SchedulableCall, n: int, plan: SchedulePlan) -> None:
        call.status = CallStatus.RUNNING
        self.running.append(call)
        plan.chunks.append(self._chunk(call, n))

    def _release_waiting(self, call: SchedulableCall) -> None:
        """A waiting call that could not start gives back any prefix-hit blocks it took."""
        self.kv.free(call.call_id)
        call.num_computed_tokens = 0
        call.num_cached_tokens = 0

    def _preempt(self, call: SchedulableCall, plan: SchedulePlan) -> None:
        """Evict a running call: swap its KV to host, or drop it for recompute."""
        if call in self.running:
            self.running.remove(call)
        call.num_preemptions += 1
        self.num_preemptions += 1
        plan.preempted.append(call.call_id)
        if self.config.preemption_mode != "recompute":
            pairs = self.kv.swap_out([call.call_id])
            if pairs is not None:
                plan.swap_out.extend(pairs)
                call.status = CallStatus.SWAPPED
                self.swapped.append(call)
                self.num_swap_outs += 1
                return
        self.kv.free(call.call_id)
        call.num_computed_tokens = 0
        call.status = CallStatus.WAITING
        self.waiting.append(call)

    def _chunk(self, call: SchedulableCall, n: int) -> ScheduledChunk:
        return ScheduledChunk(call, call.num_computed_tokens, n, self.kv.block_table(call.call_id))

    def _order_and_extend(self, plan: SchedulePlan) -> None:
        """Decodes first; when every chunk is a decode, extend to `multistep` steps if the
        lookahead blocks can be had (otherwise run one step)."""
        plan.chunks.sort(key=lambda c: not c.is_decode)
        steps = self.config.multistep
        if steps == 1 or not plan.chunks or not all(c.is_decode for c in plan.chunks):
            return
        steps = min(steps, max(c.call.num_remaining_tokens for c in plan.chunks))
        if steps <= 1:
            return
        for chunk in plan.chunks:
            if not self.kv.allocate(chunk.call.call_id, chunk.start + steps):
                return
        plan.num_steps = steps
        plan.chunks[:] = [self._chunk(c.call, c.num_tokens) for c in plan.chunks]
