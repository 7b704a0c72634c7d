"""Batch formation over discretized priority queues, and the bookkeeping after each step.

Every unfinished call sits in one of two `LevelQueues`: `running` (holds device blocks) or
`queued` (waiting, or swapped to host). A round walks the levels top-down; at each level it
first gives the running calls their next chunk (preempting the lowest-priority running call
when blocks run out), then admits queued calls of that level (swap-in, or prefix hit on the
device or fetched from host, then prefill) while seats, blocks and token budget allow,
preempting strictly lower-level running calls for them (at most `max_preemptions_per_round`).
An admission evicts only cached KV its level may take (`ProgramMemory.admission_rank`); short
of that, the call waits. With `multistep=N` a round of decodes is reused for N steps (a call
added meanwhile ends the round, with `multistep_yields`).
`update` is the one place the outcome of a step is applied.
"""

from __future__ import annotations

import itertools
import statistics
from collections import Counter
from dataclasses import dataclass, field
from typing import Sequence

from kvcache.manager import KVCacheManager
from scheduler.call_state import CallStatus, SampledToken, SchedulableCall
from scheduler.config import SchedulerConfig
from scheduler.deadlines import DeadlineWatch
from scheduler.history_chains import HistoryChains
from scheduler.load import SchedulerLoad
from scheduler.memory import NO_OWNER_RANK, UNLIMITED, ProgramMemory
from scheduler.plan import SchedulePlan, ScheduledChunk
from scheduler.policies import Policy
from scheduler.preemption import (PreemptionKind, TransferRates, choose_preemption,
                                  preemption_costs)
from scheduler.process_table import CallRecord, ProcessTable, ProgramRecord
from scheduler.queues import LevelQueues, QueueLevels
from scheduler.starvation import starvation_ratio

PROVISIONAL_QUANTUM_SECONDS = 1.0
TOKEN_MODE_QUANTUM = 256.0


@dataclass(slots=True)
class _Round:
    """One round's state. Its chunks are kept in two lists, decodes and prefill chunks, each
    in the order scheduled: `chunks()` is then the plan's order (decodes first) without a
    sort."""

    budget: int
    unvisited_running: int  # running calls the walk has not reached: 1 token kept for each
    scheduled: set[str] = field(default_factory=set)
    preempted: set[str] = field(default_factory=set)
    priority_preemptions: int = 0
    short_of_blocks: tuple[int, int] = (0, 0)  # (calls waiting for blocks, blocks one needs)
    decodes: list[ScheduledChunk] = field(default_factory=list)
    prefills: list[ScheduledChunk] = field(default_factory=list)

    def add(self, chunk: ScheduledChunk) -> None:
        """Schedule `chunk` (of a call not scheduled yet this round), taking its tokens off
        the budget."""
        (self.decodes if chunk.is_decode else self.prefills).append(chunk)
        self.scheduled.add(chunk.call.call_id)
        self.budget -= chunk.num_tokens

    def chunks(self) -> list[ScheduledChunk]:
        """Every chunk scheduled, decodes first, each kind in the order scheduled."""
        return self.decodes + self.prefills


class Scheduler:
    """Owns every unfinished call, its CallRecord and the process table.

    Contract: a RUNNING call holds device blocks for its computed tokens; a SWAPPED call holds
    host blocks only; a WAITING call holds none between rounds; `finish` releases everything
    and folds the call's service into its program (per the policy). The policy object holds
    everything that differs between policies; `memory` ranks the cached KV.
    """

    def __init__(self, config: SchedulerConfig, kv: KVCacheManager, policy: Policy) -> None:
        self.config = config
        self.kv = kv
        self.policy = policy
        self.table = ProcessTable(config.program_ttl, config.tenant_halflife,
                                  config.program_service_halflife, config.max_programs,
                                  config.max_programs_per_tenant, config.max_tenants,
                                  observer=policy.program_ended)
        self.num_levels = policy.num_levels(config.num_queues)
        self.levels = self._levels(config.quantum_base or (
            TOKEN_MODE_QUANTUM if config.service_mode == "tokens" else PROVISIONAL_QUANTUM_SECONDS))
        self.rates = TransferRates(config)
        self.memory = ProgramMemory(config, kv, policy, self.num_levels, self.rates)
        self.running = LevelQueues(self.num_levels)
        self.queued = LevelQueues(self.num_levels)
        self.calls: dict[str, SchedulableCall] = {}
        self.records: dict[str, CallRecord] = {}
        self.starvation = DeadlineWatch()  # waiting calls below the top level only
        self.histories = HistoryChains(kv.num_cacheable_tokens, kv.block_size)
        self.deadlines = DeadlineWatch()
        self._seq = itertools.count()
        self._step_times: list[float] = []
        self._round_calls: list[SchedulableCall] = []
        self._round_steps_left = 0
        self.preemptions: Counter[PreemptionKind] = Counter()
        self.num_rounds = 0
        self.num_steps = 0
        self.num_swap_ins = 0
        self.num_promotions = 0
        self.num_deadline_promotions = 0

    def _levels(self, quantum_base: float) -> QueueLevels:
        return QueueLevels(self.num_levels, quantum_base, self.config.quantum_growth)

    @property
    def num_preemptions(self) -> int:
        return sum(self.preemptions.values())

    @property
    def num_swap_outs(self) -> int:
        return self.preemptions[PreemptionKind.SWAP]

    @property
    def num_unfinished(self) -> int:
        return len(self.records)

    @property
    def num_running(self) -> int:
        return len(self.running)

    @property
    def num_waiting(self) -> int:
        """Calls queued (waiting or swapped), not running."""
        return len(self.queued)

    def load(self) -> SchedulerLoad:
        """What the scheduler holds now (see SchedulerLoad)."""
        queued = [self.calls[c] for c in self.queued.members()]  # sums: order is moot
        swapped = sum(1 for call in queued if call.status is CallStatus.SWAPPED)
        return SchedulerLoad(
            calls_running=len(self.running), calls_waiting=len(queued) - swapped,
            calls_swapped=swapped, programs_active=len(self.table),
            queue_depths=self.queued.depths(),
            running_tokens=sum(self.calls[c].num_tokens for c in self.running),
            waiting_tokens=sum(c.num_tokens - c.num_computed_tokens for c in queued))

    def stats(self) -> dict[str, float]:
        """Counters since start (preemptions by kind, KV moved between tiers, retention) and
        the transfer rates in use."""
        return {
            "num_rounds": self.num_rounds, "num_steps": self.num_steps,
            "num_preemptions": self.num_preemptions,
            **{f"preemptions_{kind.value}": self.preemptions[kind] for kind in PreemptionKind},
            "num_swap_ins": self.num_swap_ins, "num_promotions": self.num_promotions,
            "num_deadline_promotions": self.num_deadline_promotions,
            "offloaded_blocks": self.kv.num_offloaded_blocks,
            "fetched_blocks": self.kv.num_fetched_blocks,
            "prefetched_blocks": self.kv.num_prefetched_blocks,
            "retentions": self.memory.num_retained,
            "retentions_expired": self.memory.num_retention_expired,
            "retained_blocks": self.memory.retained_blocks,
            "host_link_bandwidth": self.rates.host_link_bandwidth,
            "prefill_tokens_per_second": self.rates.prefill_tokens_per_second,
        }

    # ----- programs and calls -----------------------------------------------------------
    def start_program(self, now: float, program_id: str | None = None,
                      tenant: str | None = None, ephemeral: bool = False,
                      program_class: str | None = None) -> str:
        return self.table.start(now, program_id, tenant, ephemeral, program_class).program_id

    def end_program(self, program_id: str, now: float, failed: bool = False
                    ) -> tuple[ProgramRecord, list[SchedulableCall]]:
        """End a program; its active calls are finished here and returned (to report them
        aborted) and its cached KV is nobody's any more. Ending a recently ended program
        returns its final record again; an unknown id raises UnknownProgramError."""
        if self.table.is_recently_ended(program_id):
            return self.table.end(program_id, failed, now), []
        program = self.table.get(program_id)
        calls = [self.calls[c] for c in list(program.active_calls)]
        idle = not calls
        for call in calls:  # no retention: the program's KV is nobody's
            self._remove(call, now)
            self.kv.free(call.call_id, program_id, NO_OWNER_RANK)
        record = self.table.end(program_id, failed, now)
        self.memory.ended(program, now, idle)
        self.histories.forget(program_id)
        return record, calls

    def add(self, call: SchedulableCall, now: float, program_id: str,
            thread_id: str | None = None, expected_tool_seconds: float | None = None,
            program_service: float | None = None,
            ttft_slo_seconds: float | None = None) -> None:
        """Queue a new call of an active program at the level its policy gives it.
        `expected_tool_seconds`: the client's hint of the tool time after this call;
        `ttft_slo_seconds`: its first-token deadline (default `config.ttft_slo_seconds`, else
        the prefill time of `config.ttft_slo_tokens` tokens at the current prefill speed);
        `program_service`: a trusted router's value of the program's service, which the
        program's service is raised to (ProcessTable.raise_service) before the policy
        computes the call's start value and level, so every replica enters it alike."""
        program = self.table.get(program_id)
        record = CallRecord(call.call_id, program_id, thread_id, now, waiting_since=now,
                            expected_tool_seconds=expected_tool_seconds,
                            ttft_slo=ttft_slo_seconds or self._default_ttft_slo())
        record.block_hashes = self.histories.hashes_for(program_id, call.all_token_ids)
        gap = self.table.add_call(record, call.num_tokens)  # may decay the program's service
        if gap is not None:
            self.memory.tool_returned(program, gap)
        if program_service is not None:
            self.table.raise_service(program, program_service)
        record.start_value = self.policy.start_value(program)
        record.queue = self.policy.entry_level(program, self.levels)
        record.quantum_left = self.levels.quantum(record.queue)
        self.calls[call.call_id] = call
        self.records[call.call_id] = record
        call.status = CallStatus.WAITING
        record.order = self.policy.order(program, record, next(self._seq))
        self.queued.add(call.call_id, record.queue, record.order)
        self.memory.queued(program, record.queue)
        self._watch_starvation(record, program)
        if record.ttft_slo is not None:  # due early enough to prefill by the deadline
            prefill = self.rates.recompute_seconds(call.num_tokens)
            self.deadlines.watch(call.call_id, now + max(0.0, record.ttft_slo - prefill))
        if self.config.multistep_yields:
            self._end_round()

    def _default_ttft_slo(self) -> float | None:
        """The engine's first-token deadline in seconds (see SchedulerConfig): fixed, or the
        prefill time of `ttft_slo_tokens` tokens now, or None."""
        if self.config.ttft_slo_seconds is not None or self.config.ttft_slo_tokens is None:
            return self.config.ttft_slo_seconds
        return self.rates.recompute_seconds(self.config.ttft_slo_tokens)

    def finish(self, call: SchedulableCall, now: float) -> CallRecord | None:
        """Remove `call` wherever it is, release all its blocks (cached ones at the rank
        `memory` gives them), fold its service into its program; an ephemeral program ends
        with its call. Returns the final record (None if the call was already finished)."""
        record = self._remove(call, now)
        if record is None:
            return None
        program = self.table.get(record.program_id)
        rank = self.memory.finished(program, record, self._next_level(program),
                                    self.kv.num_cached_blocks_of(call.call_id), now,
                                    call.all_token_ids, len(self.running) + len(self.queued))
        self.kv.free(call.call_id, record.program_id, rank)
        if program.ephemeral and not program.active_calls:
            self.table.end(record.program_id, now=now)
        else:
            self.histories.remember(record.program_id, call.all_token_ids, record.block_hashes)
        return record

    def _remove(self, call: SchedulableCall, now: float) -> CallRecord | None:
        """Take `call` out of the queues and its program's active calls, folding its service
        into the program; its blocks are the caller's to free."""
        record = self.records.pop(call.call_id, None)
        if record is None:
            return None
        for queues in (self.running, self.queued):
            if call.call_id in queues:
                queues.remove(call.call_id)
        del self.calls[call.call_id]
        self.deadlines.forget(call.call_id)
        self.starvation.forget(call.call_id)
        call.status = CallStatus.FINISHED
        self._stop_waiting(record, now)
        program = self.table.get(record.program_id)
        self.policy.complete(program, record)
        self.table.complete_call(record, now, call.num_tokens - call.num_prompt_tokens)
        return record

    # ----- after a step -----------------------------------------------------------------
    def update(self, plan: SchedulePlan, tokens: Sequence[int | None], now: float,
               swap_seconds: float = 0.0, sampled: list[SampledToken] | None = None
               ) -> list[SampledToken]:
        """Apply one executed step: charge service (demoting calls whose quantum is used up),
        advance computed tokens, append each sampled token, offer newly full blocks to the
        prefix cache, finish calls that hit a stop token or a length limit, charge swap time
        to programs, and release the step's in-flight host blocks. `tokens[i]` belongs to
        `plan.chunks[i]`. Returns the sampled tokens of calls that were still live, in chunk
        order; the caller may still finish those (stop strings). They are appended to
        `sampled` (a new list if None) as they are applied, so a caller that passes its own
        knows, should this raise midway, which calls it finished already."""
        self._charge(plan, now - plan.created_at, swap_seconds)
        self._charge_swap_time(plan, swap_seconds)
        kv, deadlines, finished = self.kv, self.deadlines, CallStatus.FINISHED
        caching = kv.enable_prefix_caching
        # Only `add` (a new call) and `_preempt` watch a deadline, so none of the plan's
        # calls gains one during this loop: without any now, there is none to forget.
        watching = len(deadlines) > 0
        if sampled is None:
            sampled = []
        for chunk, token in zip(plan.chunks, tokens):
            call = chunk.call
            if call.status is finished:
                continue
            call.num_computed_tokens = chunk.start + chunk.num_tokens
            reason = None if token is None else call.append_token(token)
            if caching:
                kv.cache_blocks(call.call_id, call.all_token_ids, call.num_computed_tokens)
            if token is None:
                continue
            if watching:  # it has a token now: no deadline is due
                deadlines.forget(call.call_id)
            record = self.finish(call, now) if reason else None
            sampled.append(SampledToken(call, token, reason, record))
        kv.end_step()
        return sampled

    def abort_step(self, plan: SchedulePlan, now: float
                   ) -> list[tuple[SchedulableCall, CallRecord]]:
        """The step of `plan` raised after planning: its copies and its forward may have run
        in part or not at all (a partial `update` included). Ends the multistep round, has
        the KV cache drop what the step's copies were to write (`abort_step`: no offload of
        it is stored, no block it fetched stays findable), and finishes every call the plan
        names (its chunks, preempted and swapped calls) that is not finished already,
        releasing all their blocks. Returns those calls with their final records; calls the
        plan does not name are untouched."""
        self._end_round()
        self.kv.abort_step()
        named = {chunk.call.call_id: chunk.call for chunk in plan.chunks}
        for call_id in (*plan.preempted, *plan.swapped):
            if call_id in self.calls:
                named.setdefault(call_id, self.calls[call_id])
        failed = []
        for call in named.values():
            record = self.finish(call, now)
            if record is not None:
                failed.append((call, record))
        return failed

    def _charge(self, plan: SchedulePlan, seconds: float, swap_seconds: float) -> None:
        """Charge each call that ran in `plan` its service (the step time, or in token mode
        the tokens it processed) and move it to the level its policy says."""
        self.num_steps += 1
        if plan.chunks:  # an empty step (idle tick, abort delivery) says nothing of step time
            self._calibrate(seconds)
            self.rates.observe_step(*_token_counts(plan.chunks), seconds - swap_seconds)
        by_tokens = self.config.service_mode == "tokens"
        records, program_of, charge = self.records, self.table.get, self.policy.charge
        levels = self.levels
        for chunk in plan.chunks:  # _charge_call, inlined: once per chunk
            call = chunk.call
            record = records.get(call.call_id)
            if record is None:
                continue
            service = chunk.num_tokens if by_tokens else seconds
            record.service += service
            record.total_service += service
            record.num_steps += 1
            level = charge(program_of(record.program_id), record, service, levels)
            if level != record.queue:
                self._move(call.call_id, record, level)

    def _move(self, call_id: str, record: CallRecord, level: int) -> None:
        """Move a call to `level` in whichever queues (running or queued) hold it."""
        queues = self.running if call_id in self.running else self.queued
        queues.remove(call_id)
        record.queue = level
        queues.add(call_id, level, record.order)

    def _charge_swap_time(self, plan: SchedulePlan, seconds: float) -> None:
        """Measure the link from the step's copies, and split their time evenly over the
        programs of the calls swapped whole."""
        transfers = bool(plan.swap_out) + bool(plan.swap_in)
        self.rates.observe_swap(len(plan.swap_out) + len(plan.swap_in), transfers, seconds)
        for call_id in plan.swapped:
            record = self.records.get(call_id)
            if record is not None:
                self.table.get(record.program_id).swap_time += seconds / len(plan.swapped)

    def _calibrate(self, seconds: float) -> None:
        """Time mode without a set quantum_base: fix it from the first steps' median time."""
        if self.config.quantum_base is not None or self.config.service_mode == "tokens":
            return
        if len(self._step_times) < self.config.calibration_steps:
            self._step_times.append(seconds)
            if len(self._step_times) == self.config.calibration_steps:
                median = statistics.median(self._step_times)
                self.levels = self._levels(max(median, 1e-6) * self.config.quantum_steps)

    # ----- one step ---------------------------------------------------------------------
    def schedule(self, now: float) -> SchedulePlan:
        if self._round_steps_left > 0:
            return self._continue_round(now)
        self.num_rounds += 1
        for expired in self.table.expire(now):
            self.memory.ended(expired, now, idle=True)
            self.histories.forget(expired.program_id)
        self.memory.expire(now, self._live_next_level)
        if self.config.anti_starvation:
            self._promote_starved(now)
        self._promote_due(now)
        plan = SchedulePlan(created_at=now)
        rnd = _Round(self.config.max_num_batched_tokens, unvisited_running=len(self.running))
        admitting = True
        for level in range(self.num_levels):
            self._schedule_running_level(level, plan, rnd, now)
            if admitting:
                admitting = self._admit_level(level, plan, rnd, now)
            if rnd.budget <= 0:
                break
        plan.chunks = rnd.chunks()
        self._start_round(plan)
        self.memory.pressure = rnd.short_of_blocks
        plan.swap_in.extend(self.memory.prefetch(now, self._live_next_level))  # allocates last
        plan.swap_out.extend(self.kv.take_offloads())
        return plan

    def _next_level(self, program: ProgramRecord) -> int:
        """The level a program's KV belongs to: its highest active call's, else the level
        its next call would enter."""
        if program.active_calls:
            return min(r.queue for r in program.active_calls.values())
        return self.policy.entry_level(program, self.levels)

    def _live_next_level(self, program_id: str) -> int | None:
        return self._next_level(self.table.get(program_id)) if program_id in self.table \
            else None

    def _schedule_running_level(self, level: int, plan: SchedulePlan, rnd: _Round,
                                now: float) -> None:
        """Give each running call of `level`, in order, its next chunk while the budget
        lasts (the hot path: once per running call per round, so the common case, blocks
        to spare, is inlined here; `_make_room` preempts when they run short)."""
        kv, calls, preempted = self.kv, self.calls, rnd.preempted
        windowed = kv.attention_window > 0
        for call_id in self.running.snapshot(level):
            budget = rnd.budget
            if budget <= 0:
                break
            # A call leaves the running queues during the walk only by preemption (and an
            # admission adds calls at the level being admitted, whose snapshot is taken).
            if call_id in preempted:
                continue
            call = calls[call_id]
            start, num_tokens = call.num_computed_tokens, call.num_tokens
            n = num_tokens - start
            if n > budget:
                n = budget
            if windowed:
                kv.drop_outside_window(call_id, start)
            table = kv.allocate_table(call_id, start + n)
            if table is None:
                table = self._make_room(call, start + n, plan, rnd, now)
                if table is None:  # the call itself was preempted
                    continue
            samples = start + n == num_tokens
            chunk = ScheduledChunk(call, start, n, table, samples)
            (rnd.decodes if n == 1 and samples else rnd.prefills).append(chunk)  # rnd.add
            rnd.scheduled.add(call_id)
            rnd.budget = budget - n
            rnd.unvisited_running -= 1

    def _make_room(self, call: SchedulableCall, num_tokens: int, plan: SchedulePlan,
                   rnd: _Round, now: float) -> list[int] | None:
        """Preempt the lowest-priority running call not yet scheduled this round (`call`
        itself when it is that one) until `call`'s table covers `num_tokens`. Returns its
        table, or None if `call` was preempted."""
        while True:
            victim_id = self.running.lowest(skip=rnd.scheduled)
            victim = call if victim_id is None else self.calls[victim_id]
            self._preempt(victim, plan, rnd, now, for_memory=True)
            if victim is call:
                return None
            table = self.kv.allocate_table(call.call_id, num_tokens)
            if table is not None:
                return table

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
        """Start a queued call (swap-in, or prefix hit and fetch from host, then prefill),
        preempting lower levels if allowed; the call waits (False) rather than evict cached
        KV above its level's admission rank, unless nothing at all is running."""
        # Running calls of lower queues still get their next token: admissions never take
        # the budget they need (otherwise long prefills would stall every decode).
        budget = rnd.budget - rnd.unvisited_running
        if budget <= 0:
            return False
        swapped = call.status is CallStatus.SWAPPED
        record = self.records[call.call_id]
        fetch = 0
        if not swapped and call.num_computed_tokens == 0 and call.takes_prefix_hits:
            call.num_cached_tokens = self.kv.match_prefix(call.call_id, call.all_token_ids,
                                                          record.block_hashes)
            call.num_computed_tokens = call.num_cached_tokens
            fetch = self._blocks_worth_fetching(call)
        remaining = call.num_tokens - call.num_computed_tokens - fetch * self.kv.block_size
        if remaining > budget and not swapped and not self.config.enable_chunked_prefill:
            self._release_waiting(call)
            return False
        n = min(remaining, budget)
        while True:
            num_running = len(self.running)
            max_rank = self.memory.admission_rank(level) if num_running else UNLIMITED
            short_of_seats = num_running >= self.config.max_num_seqs
            fits = self._fits(call, n, fetch, max_rank)
            if fits and not short_of_seats:
                break
            # A call promoted against starvation waits for room instead of making it: its
            # victims would soon starve in turn, and promote, and preempt (a ping-pong).
            victim = None
            if not record.promoted and \
                    rnd.priority_preemptions < self.config.max_preemptions_per_round:
                victim = self.policy.priority_victim(self.running, level, rnd.scheduled)
            if victim is None:
                if not fits:  # this call and every one queued after it wait for blocks
                    wanted = self.kv.blocks_needed(call.call_id, _target(call, n, fetch,
                                                                         self.kv.block_size))
                    rnd.short_of_blocks = (sum(self.queued.depths()[level:]), wanted)
                if not swapped:
                    self._release_waiting(call)
                return False
            self._preempt(self.calls[victim], plan, rnd, now, for_memory=not fits)
            rnd.priority_preemptions += 1
        self._reserve(call, n, fetch, plan, max_rank)
        record.promoted = False
        self._stop_waiting(record, now)
        self.queued.remove(call.call_id)
        self.starvation.forget(call.call_id)
        call.status = CallStatus.RUNNING
        self.running.add(call.call_id, record.queue, record.order)
        self._add_chunk(call, n, rnd)
        return True

    def _blocks_worth_fetching(self, call: SchedulableCall) -> int:
        """Host-cached blocks continuing the call's prefix hit, if one copy back beats
        recomputing them (else 0)."""
        found = self.kv.host_prefix_blocks(call.call_id, call.all_token_ids)
        if found and self.rates.swap_seconds(found) / 2 < \
                self.rates.recompute_seconds(found * self.kv.block_size):
            return found
        return 0

    def _fits(self, call: SchedulableCall, n: int, fetch: int, max_rank: float) -> bool:
        """Whether the blocks for the call's next `n` tokens (after fetching `fetch` prefix
        blocks, or swapping it in) can be had evicting ranks up to `max_rank`."""
        target = _target(call, n, fetch, self.kv.block_size)
        if call.status is CallStatus.SWAPPED:
            held = self.kv.num_host_blocks_of(call.call_id)  # may exceed target (lookahead)
            needed = max(held, -(-target // self.kv.block_size))
        else:
            needed = self.kv.blocks_needed(call.call_id, target)
        return needed <= self.kv.num_evictable_blocks(max_rank)

    def _reserve(self, call: SchedulableCall, n: int, fetch: int, plan: SchedulePlan,
                 max_rank: float) -> None:
        """Take the blocks `_fits` found: swap the call in, or fetch its host prefix (unless a
        preemption's swap-out has since evicted part of it from the host: then it is
        recomputed), then grow its table for the next `n` tokens."""
        if call.status is CallStatus.SWAPPED:
            pairs = self.kv.swap_in([call.call_id], max_rank)
            plan.swapped.append(call.call_id)
            self.num_swap_ins += 1
        elif fetch and self.kv.host_prefix_blocks(call.call_id, call.all_token_ids) >= fetch:
            pairs = self.kv.fetch_prefix(call.call_id, call.all_token_ids, fetch, max_rank)
            call.num_computed_tokens += fetch * self.kv.block_size
            call.num_cached_tokens = call.num_computed_tokens
        else:
            pairs = []
        if pairs is None or not self.kv.allocate(call.call_id, call.num_computed_tokens + n,
                                                 max_rank):
            raise RuntimeError(f"blocks for {call.call_id} ran short after a space check")
        plan.swap_in.extend(pairs)

    def _release_waiting(self, call: SchedulableCall) -> None:
        """A waiting call that could not start gives back any prefix-hit blocks it took
        (at its program's queued rank: they are still wanted)."""
        record = self.records[call.call_id]
        program = self.table.get(record.program_id)
        self.kv.free(call.call_id, record.program_id,
                     self.memory.free_rank(program, record.queue))
        call.num_computed_tokens = 0
        call.num_cached_tokens = 0

    def _add_chunk(self, call: SchedulableCall, n: int, rnd: _Round) -> None:
        start = call.num_computed_tokens
        rnd.add(ScheduledChunk(call, start, n, self.kv.block_table(call.call_id),
                               samples=start + n == call.num_tokens))

    # ----- preemption -------------------------------------------------------------------
    def _preempt(self, call: SchedulableCall, plan: SchedulePlan, rnd: _Round, now: float,
                 for_memory: bool) -> None:
        """Evict a running call, doing with its KV what `choose_preemption` picks: keep it in
        the prefix cache at its program's rank, bulk-swap it to host, or drop it (freed at
        the no-owner rank, so it goes before any live program's KV)."""
        self.running.remove(call.call_id)
        if call.call_id not in rnd.scheduled:
            rnd.unvisited_running -= 1
        call.num_preemptions += 1
        rnd.preempted.add(call.call_id)
        record = self.records[call.call_id]
        program = self.table.get(record.program_id)
        rank = self.memory.free_rank(program, record.queue)
        kind = self._preemption_kind(call, for_memory)
        pairs = None
        if kind is PreemptionKind.SWAP:
            pairs = self.kv.swap_out([call.call_id], record.program_id, rank)
            kind = PreemptionKind.SWAP if pairs is not None else PreemptionKind.RECOMPUTE
        if pairs is not None:
            plan.swap_out.extend(pairs)
            plan.swapped.append(call.call_id)
            call.status = CallStatus.SWAPPED
        else:
            self.kv.free(call.call_id, record.program_id,
                         rank if kind is PreemptionKind.KEEP else NO_OWNER_RANK)
            call.num_computed_tokens = 0
            call.status = CallStatus.WAITING
        self.preemptions[kind] += 1
        plan.preempted[call.call_id] = kind
        if self.config.itl_slo_seconds and call.num_tokens > call.num_prompt_tokens:
            self.deadlines.watch(call.call_id, now + self.config.itl_slo_seconds)
        record.waiting_since = now
        self.queued.add(call.call_id, record.queue, record.order)
        self.memory.queued(program, record.queue)
        self._watch_starvation(record, program)

    def _preemption_kind(self, call: SchedulableCall, for_memory: bool) -> PreemptionKind:
        mode = self.config.preemption_mode
        if mode == "recompute":  # what choose_preemption picks whatever the costs
            return PreemptionKind.RECOMPUTE
        blocks = len(self.kv.block_table(call.call_id))
        can_keep = self.kv.enable_prefix_caching and (mode == "keep" or self.memory.enabled)
        costs = preemption_costs(self.rates, blocks, call.num_computed_tokens,
                                 self.kv.block_size, can_keep,
                                 can_swap=blocks <= self.kv.num_free_host_blocks,
                                 for_memory=for_memory)
        return choose_preemption(mode, costs)

    # ----- queues, waiting, starvation ---------------------------------------------------
    def _stop_waiting(self, record: CallRecord, now: float) -> None:
        if record.waiting_since is not None:
            waited = now - record.waiting_since
            record.wait += waited
            record.total_wait += waited
            record.waiting_since = None

    def _watch_starvation(self, record: CallRecord, program: ProgramRecord) -> None:
        if self.config.anti_starvation and record.queue > 0:
            deadline = self.policy.starvation_deadline(program, record,
                                                       self.config.starvation_beta)
            if deadline is not None:
                self.starvation.watch(record.call_id, deadline)

    def _promote_starved(self, now: float) -> None:
        beta = self.config.starvation_beta
        for call_id in self.starvation.due(now):
            record = self.records.get(call_id)
            if record is None or call_id not in self.queued or record.queue == 0:
                continue
            program = self.table.get(record.program_id)
            if starvation_ratio(program, record, now) < beta:
                self._watch_starvation(record, program)
                continue
            self._promote(record, program, now, may_preempt=False)
            record.wait = record.service = 0.0
            self.num_promotions += 1

    def _promote_due(self, now: float) -> None:
        """Promote the queued calls whose first-token or inter-token deadline is due. Only a
        call still without a token may preempt to get in: a preempted stream waits for the
        next free seat (preempting another stream would only move the gap to it), so two
        streams never take turns preempting each other."""
        for call_id in self.deadlines.due(now):
            record = self.records.get(call_id)
            if record is not None and call_id in self.queued and record.queue > 0:
                call = self.calls[call_id]
                self._promote(record, self.table.get(record.program_id), now,
                              may_preempt=call.num_tokens == call.num_prompt_tokens)
                self.num_deadline_promotions += 1

    def _promote(self, record: CallRecord, program: ProgramRecord, now: float,
                 may_preempt: bool) -> None:
        """Move a queued call to the top level with that level's quantum (`promoted`
        unless it `may_preempt` lower levels to get in)."""
        self.queued.remove(record.call_id)
        self.starvation.forget(record.call_id)  # at the top level: nothing to starve for
        self._stop_waiting(record, now)
        record.queue = 0
        record.promoted = not may_preempt
        record.quantum_left = self.levels.quantum(0)
        record.waiting_since = now
        self.queued.add(record.call_id, 0, record.order)
        self.memory.queued(program, 0)

    # ----- multistep ----------------------------------------------------------------------
    def _start_round(self, plan: SchedulePlan) -> None:
        """If every chunk is a decode, reserve blocks for `multistep - 1` more decode steps
        and reuse this batch for them without scheduling again."""
        steps = self.config.multistep
        # Decodes come first (SchedulePlan): the last chunk is a decode only if all are.
        if steps == 1 or not plan.chunks or not plan.chunks[-1].is_decode:
            return
        steps = min(steps, max(c.call.num_remaining_tokens for c in plan.chunks))
        for chunk in plan.chunks:
            if not self.kv.allocate(chunk.call.call_id, chunk.start + steps):
                return
        self._round_calls = [c.call for c in plan.chunks]
        self._round_steps_left = steps - 1

    def _end_round(self) -> None:
        """No step of the current multistep round is left: the next step schedules. The
        blocks reserved for the round's steps stay with their calls, used as they grow."""
        self._round_calls, self._round_steps_left = [], 0

    def _continue_round(self, now: float) -> SchedulePlan:
        """The next step of a multistep round: the round's calls still running, one token
        each; calls that finished have already released their blocks."""
        self._round_steps_left -= 1
        plan = SchedulePlan(created_at=now, is_continuation=True)
        plan.chunks = [ScheduledChunk(c, c.num_computed_tokens, 1,
                                      self.kv.block_table(c.call_id), samples=True)
                       for c in self._round_calls if c.status is CallStatus.RUNNING]
        if not plan.chunks or not self._round_steps_left:
            self._end_round()  # nothing left to run in it: forget its calls
        return plan

    # ----- checks -----------------------------------------------------------------------
    def check_integrity(self) -> None:
        """KV pools consistent; every call in exactly one queue; process table agrees; history
        chains only of live programs."""
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
        self.histories.check_integrity(self.table)


def _token_counts(chunks: Sequence[ScheduledChunk]) -> tuple[int, int]:
    """(prefill tokens, all tokens) of a step's chunks, in one pass."""
    prefill = total = 0
    for chunk in chunks:
        total += chunk.num_tokens
        if not chunk.is_decode:
            prefill += chunk.num_tokens
    return prefill, total


def _target(call: SchedulableCall, n: int, fetch: int, block_size: int) -> int:
    """The tokens a call's table covers once it fetched `fetch` prefix blocks and ran `n`."""
    return call.num_computed_tokens + fetch * block_size + n
