"""Batch formation over discretized priority queues.

Every unfinished call sits in one of two `LevelQueues`: `running` (holds device blocks) or
`queued` (waiting, or swapped to host). A round walks the levels top-down; at each level it
first gives the running calls their next chunk (preempting the lowest-priority running call
when blocks run out), then admits queued calls of that level (swap-in or prefill) while seats,
blocks and token budget allow, preempting strictly lower-level running calls for them (at most
`max_preemptions_per_round`). With `multistep=N` a round of decodes is reused for N steps.
"""

from __future__ import annotations

import itertools
import statistics
from dataclasses import dataclass, field

from kvcache.manager import KVCacheManager
from scheduler.call_state import CallStatus, SchedulableCall
from scheduler.config import SchedulerConfig
from scheduler.plan import SchedulePlan, ScheduledChunk
from scheduler.policy import Policy
from scheduler.process_table import CallRecord, ProcessTable, ProgramRecord
from scheduler.queues import LevelQueues, QueueLevels
from scheduler.starvation import StarvationWatch, crossing_time, starvation_ratio

PROVISIONAL_QUANTUM_SECONDS = 1.0
TOKEN_MODE_QUANTUM = 256.0


@dataclass
class _Round:
    budget: int
    unvisited_running: int  # running calls the walk has not reached: 1 token kept for each
    scheduled: set[str] = field(default_factory=set)
    preempted: set[str] = field(default_factory=set)
    priority_preemptions: int = 0


class Scheduler:
    """Owns every unfinished call, its CallRecord and the process table.

    Contract: a RUNNING call holds device blocks for its computed tokens; a SWAPPED call holds
    host blocks only; a WAITING call holds none between rounds; `finish` releases everything
    and folds the call's service into its program (per the policy).
    """

    def __init__(self, config: SchedulerConfig, kv: KVCacheManager, policy: Policy) -> None:
        self.config = config
        self.kv = kv
        self.policy = policy
        self.table = ProcessTable(config.program_ttl, config.tenant_halflife)
        self.num_levels = config.num_queues if policy.uses_levels else 1
        self._guards_starvation = (config.anti_starvation and policy.uses_levels
                                   and policy.guards_starvation)
        self.levels = self._levels(config.quantum_base or (
            TOKEN_MODE_QUANTUM if config.service_mode == "tokens" else PROVISIONAL_QUANTUM_SECONDS))
        self.running = LevelQueues(self.num_levels)
        self.queued = LevelQueues(self.num_levels)
        self.calls: dict[str, SchedulableCall] = {}
        self.records: dict[str, CallRecord] = {}
        self.starvation = StarvationWatch()
        self._seq = itertools.count()
        self._step_times: list[float] = []
        self._round_calls: list[SchedulableCall] = []
        self._round_steps_left = 0
        self.num_rounds = 0
        self.num_steps = 0
        self.num_preemptions = 0
        self.num_swap_outs = 0
        self.num_swap_ins = 0
        self.num_promotions = 0

    def _levels(self, quantum_base: float) -> QueueLevels:
        return QueueLevels(self.num_levels, quantum_base, self.config.quantum_growth)

    # ----- programs and calls -----------------------------------------------------------
    def start_program(self, now: float, program_id: str | None = None,
                      tenant: str | None = None, ephemeral: bool = False) -> str:
        return self.table.start(now, program_id, tenant, ephemeral).program_id

    def end_program(self, program_id: str, now: float, failed: bool = False
                    ) -> tuple[ProgramRecord, list[SchedulableCall]]:
        """End a program; its active calls are finished here and returned (to report them
        aborted). Ending a recently ended program returns its final record again; an unknown
        id raises UnknownProgramError."""
        if self.table.is_recently_ended(program_id):
            return self.table.end(program_id, failed, now), []
        program = self.table.get(program_id)
        calls = [self.calls[c] for c in list(program.active_calls)]
        for call in calls:
            self.finish(call, now)
        return self.table.end(program_id, failed, now), calls

    def add(self, call: SchedulableCall, now: float, program_id: str,
            thread_id: str | None = None) -> None:
        """Queue a new call of an active program at the level of the program's value."""
        program = self.table.get(program_id)
        value = self.policy.start_value(program)
        level = self.levels.level_of(value)
        record = CallRecord(call.call_id, program_id, thread_id, now, queue=level,
                            quantum_left=self.levels.quantum(level), start_value=value,
                            waiting_since=now)
        self.table.add_call(record, call.num_tokens)
        self.calls[call.call_id] = call
        self.records[call.call_id] = record
        call.status = CallStatus.WAITING
        record.order = self.policy.order(program, record, next(self._seq))
        self.queued.add(call.call_id, level, record.order)
        self._watch_starvation(record, program)

    def finish(self, call: SchedulableCall, now: float) -> None:
        """Remove `call` wherever it is, release all its blocks, fold its service into its
        program; an ephemeral program ends with its call."""
        record = self.records.pop(call.call_id, None)
        if record is None:
            return
        for queues in (self.running, self.queued):
            if call.call_id in queues:
                queues.remove(call.call_id)
        del self.calls[call.call_id]
        self.kv.free(call.call_id)
        call.status = CallStatus.FINISHED
        self._stop_waiting(record, now)
        program = self.table.get(record.program_id)
        self.policy.complete(program, record)
        self.table.complete_call(record, now, call.num_tokens - call.num_prompt_tokens)
        if program.ephemeral and not program.active_calls:
            self.table.end(record.program_id, now=now)

    def charge(self, plan: SchedulePlan, seconds: float) -> None:
        """Charge each call that ran in `plan` its service (the step time, or in token mode
        the tokens it processed) and demote it when its quantum is used up."""
        self.num_steps += 1
        if plan.chunks:  # an empty step (idle tick, abort delivery) says nothing of step time
            self._calibrate(seconds)
        by_tokens = self.config.service_mode == "tokens"
        for chunk in plan.chunks:
            record = self.records.get(chunk.call.call_id)
            if record is not None:
                self._charge_call(chunk.call, record, chunk.num_tokens if by_tokens else seconds)

    def _charge_call(self, call: SchedulableCall, record: CallRecord, service: float) -> None:
        record.service += service
        record.total_service += service
        first_step = record.num_steps == 0
        record.num_steps += 1
        if not (self.policy.uses_levels and self.policy.demotes):
            return
        level = record.queue
        if first_step and self.policy.skip_join:
            level = next((i for i in range(self.num_levels) if self.levels.quantum(i) >= service),
                         self.num_levels - 1)
            record.quantum_left = self.levels.quantum(level) - service
        else:
            record.quantum_left -= service
        while record.quantum_left <= 0 and level < self.num_levels - 1:
            level += 1
            record.quantum_left += self.levels.quantum(level)
        if level != record.queue:
            queues = self.running if call.call_id in self.running else self.queued
            queues.remove(call.call_id)
            record.queue = level
            queues.add(call.call_id, level, record.order)

    def _calibrate(self, seconds: float) -> None:
        """Time mode without a set quantum_base: fix it from the first steps' median time."""
        if self.config.quantum_base is not None or self.config.service_mode == "tokens":
            return
        if len(self._step_times) < self.config.calibration_steps:
            self._step_times.append(seconds)
            if len(self._step_times) == self.config.calibration_steps:
                median = statistics.median(self._step_times)
                self.levels = self._levels(max(median, 1e-6) * self.config.quantum_steps)

    @property
    def num_unfinished(self) -> int:
        return len(self.records)

    # ----- one step ---------------------------------------------------------------------
    def schedule(self, now: float) -> SchedulePlan:
        if self._round_steps_left > 0:
            return self._continue_round(now)
        self.num_rounds += 1
        self.table.expire(now)
        if self._guards_starvation:
            self._promote_starved(now)
        plan = SchedulePlan(created_at=now)
        rnd = _Round(self.config.max_num_batched_tokens, unvisited_running=len(self.running))
        admitting = True
        for level in range(self.num_levels):
            for call_id in self.running.snapshot(level):
                if rnd.budget <= 0:
                    break
                if call_id in self.running:  # not preempted earlier in this walk
                    self._schedule_running(self.calls[call_id], plan, rnd, now)
            if admitting:
                admitting = self._admit_level(level, plan, rnd, now)
            if rnd.budget <= 0:
                break
        plan.chunks.sort(key=lambda c: not c.is_decode)
        self._start_round(plan)
        return plan

    def _schedule_running(self, call: SchedulableCall, plan: SchedulePlan, rnd: _Round,
                          now: float) -> None:
        """Give a running call its next chunk (the hot path: once per running call)."""
        call_id, start, num_tokens = call.call_id, call.num_computed_tokens, call.num_tokens
        n = min(num_tokens - start, rnd.budget)
        while not self.kv.allocate(call_id, start + n):
            victim = self._lowest_running(rnd, above_level=None) or call
            self._preempt(victim, plan, rnd, now)
            if victim is call:
                return
        plan.chunks.append(ScheduledChunk(call, start, n, self.kv.block_table(call_id),
                                          start + n == num_tokens))
        rnd.scheduled.add(call_id)
        rnd.budget -= n
        rnd.unvisited_running -= 1

    def _admit_level(self, level: int, plan: SchedulePlan, rnd: _Round, now: float) -> bool:
        """Admit queued calls of one level in order (without copying the level); False once
        one could not be admitted, which closes admission for this round."""
        index = 0
        while rnd.budget > 0:
            call_id = self.queued.item_at(level, index)
            if call_id is None:
                break
            if call_id in rnd.preempted:  # evicted this round: not back in the same round
                index += 1
            elif not self._admit(self.calls[call_id], level, plan, rnd, now):
                return False
        return True

    def _admit(self, call: SchedulableCall, level: int, plan: SchedulePlan, rnd: _Round,
               now: float) -> bool:
        """Start a queued call (swap-in or prefill), preempting lower levels if allowed."""
        # Running calls of lower queues still get their next token: admissions never take
        # the budget they need (otherwise long prefills would stall every decode).
        budget = rnd.budget - rnd.unvisited_running
        if budget <= 0:
            return False
        swapped = call.status is CallStatus.SWAPPED
        if not swapped and call.num_computed_tokens == 0:
            call.num_cached_tokens = self.kv.match_prefix(call.call_id, call.all_token_ids)
            call.num_computed_tokens = call.num_cached_tokens
        remaining = call.num_tokens - call.num_computed_tokens
        if remaining > budget and not swapped and not self.config.enable_chunked_prefill:
            self._release_waiting(call)
            return False
        n = min(remaining, budget)
        record = self.records[call.call_id]
        while len(self.running) >= self.config.max_num_seqs or not self._reserve(call, n, plan):
            # A call promoted against starvation waits for room instead of making it: its
            # victims would soon starve in turn, and promote, and preempt (a ping-pong).
            victim = None if record.promoted else self._priority_victim(level, rnd)
            if victim is None:
                if not swapped:
                    self._release_waiting(call)
                return False
            self._preempt(victim, plan, rnd, now)
            rnd.priority_preemptions += 1
        record.promoted = False
        self._stop_waiting(record, now)
        self.queued.remove(call.call_id)
        call.status = CallStatus.RUNNING
        self.running.add(call.call_id, record.queue, record.order)
        self._add_chunk(call, n, plan, rnd)
        return True

    def _reserve(self, call: SchedulableCall, n: int, plan: SchedulePlan) -> bool:
        """Blocks for the next `n` tokens (swapping the call in first if it is on host)."""
        target = call.num_computed_tokens + n
        if call.status is not CallStatus.SWAPPED:
            return self.kv.allocate(call.call_id, target)
        held = self.kv.num_host_blocks_of(call.call_id)  # may exceed target (lookahead)
        if max(held, -(-target // self.kv.block_size)) > self.kv.num_free_blocks:
            return False
        pairs = self.kv.swap_in([call.call_id])
        if pairs is None or not self.kv.allocate(call.call_id, target):
            raise RuntimeError(f"swap-in of {call.call_id} failed after a space check")
        plan.swap_in.extend(pairs)
        plan.swapped.append(call.call_id)
        self.num_swap_ins += 1
        return True

    def _release_waiting(self, call: SchedulableCall) -> None:
        """A waiting call that could not start gives back any prefix-hit blocks it took."""
        self.kv.free(call.call_id)
        call.num_computed_tokens = 0
        call.num_cached_tokens = 0

    def _add_chunk(self, call: SchedulableCall, n: int, plan: SchedulePlan, rnd: _Round) -> None:
        start = call.num_computed_tokens
        plan.chunks.append(ScheduledChunk(call, start, n, self.kv.block_table(call.call_id),
                                          samples=start + n == call.num_tokens))
        rnd.scheduled.add(call.call_id)
        rnd.budget -= n

    # ----- preemption -------------------------------------------------------------------
    def _lowest_running(self, rnd: _Round, above_level: int | None) -> SchedulableCall | None:
        """The lowest-priority running call not scheduled this round (and, if `above_level`
        is given, in a strictly lower queue than it)."""
        for level in range(self.num_levels - 1, -1, -1):
            if above_level is not None and level <= above_level:
                return None
            for call_id in reversed(self.running.snapshot(level)):
                if call_id not in rnd.scheduled:
                    return self.calls[call_id]
        return None

    def _priority_victim(self, level: int, rnd: _Round) -> SchedulableCall | None:
        if not self.policy.uses_levels or \
                rnd.priority_preemptions >= self.config.max_preemptions_per_round:
            return None
        return self._lowest_running(rnd, above_level=level)

    def _preempt(self, call: SchedulableCall, plan: SchedulePlan, rnd: _Round,
                 now: float) -> None:
        """Evict a running call: bulk-swap its KV to host, or drop it for recompute."""
        self.running.remove(call.call_id)
        if call.call_id not in rnd.scheduled:
            rnd.unvisited_running -= 1
        call.num_preemptions += 1
        self.num_preemptions += 1
        plan.preempted.append(call.call_id)
        rnd.preempted.add(call.call_id)
        pairs = self.kv.swap_out([call.call_id]) if self._should_swap(call) else None
        if pairs is not None:
            plan.swap_out.extend(pairs)
            plan.swapped.append(call.call_id)
            call.status = CallStatus.SWAPPED
            self.num_swap_outs += 1
        else:
            self.kv.free(call.call_id)
            call.num_computed_tokens = 0
            call.status = CallStatus.WAITING
        record = self.records[call.call_id]
        record.waiting_since = now
        self.queued.add(call.call_id, record.queue, record.order)
        self._watch_starvation(record, self.table.get(record.program_id))

    def _should_swap(self, call: SchedulableCall) -> bool:
        mode = self.config.preemption_mode
        if mode != "auto":
            return mode == "swap"
        return self.swap_seconds(len(self.kv.block_table(call.call_id))) < \
            self.recompute_seconds(call.num_computed_tokens)

    def swap_seconds(self, num_blocks: int) -> float:
        """Estimated time to swap `num_blocks` out and back in (two bulk transfers)."""
        one_way = num_blocks * self.config.bytes_per_block / self.config.host_link_bandwidth
        return 2 * (one_way + self.config.swap_latency)

    def recompute_seconds(self, num_tokens: int) -> float:
        return num_tokens / self.config.prefill_tokens_per_second

    # ----- queues, waiting, starvation ---------------------------------------------------
    def _stop_waiting(self, record: CallRecord, now: float) -> None:
        if record.waiting_since is not None:
            waited = now - record.waiting_since
            record.wait += waited
            record.total_wait += waited
            record.waiting_since = None

    def _watch_starvation(self, record: CallRecord, program: ProgramRecord) -> None:
        if self._guards_starvation and record.queue > 0:
            self.starvation.watch(record.call_id,
                                  crossing_time(program, record, self.config.starvation_beta))

    def _promote_starved(self, now: float) -> None:
        beta = self.config.starvation_beta
        for call_id in self.starvation.due(now):
            record = self.records.get(call_id)
            if record is None or call_id not in self.queued or record.queue == 0:
                continue
            program = self.table.get(record.program_id)
            if starvation_ratio(program, record, now) < beta:
                self.starvation.watch(call_id, crossing_time(program, record, beta))
                continue
            self.queued.remove(call_id)
            self._stop_waiting(record, now)
            record.queue = 0
            record.promoted = True
            record.quantum_left = self.levels.quantum(0)
            record.wait = record.service = 0.0
            record.waiting_since = now
            self.queued.add(call_id, 0, record.order)
            self.num_promotions += 1

    # ----- multistep ----------------------------------------------------------------------
    def _start_round(self, plan: SchedulePlan) -> None:
        """If every chunk is a decode, reserve blocks for `multistep - 1` more decode steps
        and reuse this batch for them without scheduling again."""
        steps = self.config.multistep
        if steps == 1 or not plan.chunks or not all(c.is_decode for c in plan.chunks):
            return
        steps = min(steps, max(c.call.num_remaining_tokens for c in plan.chunks))
        for chunk in plan.chunks:
            if not self.kv.allocate(chunk.call.call_id, chunk.start + steps):
                return
        self._round_calls = [c.call for c in plan.chunks]
        self._round_steps_left = steps - 1

    def _continue_round(self, now: float) -> SchedulePlan:
        """The next step of a multistep round: the round's calls still running, one token
        each; calls that finished have already released their blocks."""
        self._round_steps_left -= 1
        plan = SchedulePlan(created_at=now, is_continuation=True)
        plan.chunks = [ScheduledChunk(c, c.num_computed_tokens, 1,
                                      self.kv.block_table(c.call_id), samples=True)
                       for c in self._round_calls if c.status is CallStatus.RUNNING]
        if not plan.chunks:
            self._round_steps_left = 0
        return plan

    # ----- checks -----------------------------------------------------------------------
    def check_integrity(self) -> None:
        """KV pools consistent; every call in exactly one queue; process table agrees."""
        self.kv.check_integrity()
        ids = set(self.records)
        in_running = {c for c in self.calls if c in self.running}
        in_queued = {c for c in self.calls if c in self.queued}
        if in_running & in_queued or in_running | in_queued != ids or \
                len(self.running) + len(self.queued) != len(ids) or set(self.calls) != ids:
            raise RuntimeError("scheduler queues disagree with its call records")
        for call_id in in_running:
            if self.calls[call_id].status is not CallStatus.RUNNING:
                raise RuntimeError(f"{call_id} is in the running queues but not RUNNING")
        self.table.check_integrity(ids)
