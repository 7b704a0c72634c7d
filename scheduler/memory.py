"""Program-aware KV memory: the ranks the scheduler gives its programs' cached blocks.

The block pool evicts cached free blocks lowest rank first (LRU inside a rank) and knows
nothing else; this object turns program state into those ranks (`kv_memory="program"`):

- rank 0 (`NO_OWNER_RANK`): KV no live program owns (ended, expired, one-call programs);
- a live program's KV: `policy.retention_rank(level, ..., retention)`, where `level` is the
  level its next call enters (or its queued call waits in) and `retention` is QUEUED when
  it has a call waiting, TOOL_CALL while it is between calls within its retention time and
  the budget, else NONE (so inside a level: unretained first, then queued, then tool calls);
- an admission of a call at level L may evict only ranks up to a queued program's at L
  (`admission_rank`): never a higher-priority program's retained KV, nor a tool call's KV
  retained at its own level; short of blocks it may take, the call waits (the engine's
  admission control). Queued KV of its own level stays evictable, or FCFS (one level) would
  stall behind the KV of the calls queued after it.
- without `kv_ranks_by_level`, every rank is taken at the last level (as if there were one):
  ranks follow the retention state alone, and no admission evicts a retained tool call's KV.

Tool-call retention: when a program's last active call finishes, its KV is retained for a
time (`retention_seconds`: the client's hint of the tool time x `retention_ttl_factor`, else
the rule of `scheduler.tool_times` on its class's observed return times, which weighs the
reload that eviction would cost against the calls now short of blocks, else the ttl rule on
its own mean gap or `retention_prior_seconds`), capped by `retention_max_seconds`, while the
retained blocks of all programs stay within `retention_budget` of the pool; past either, the
blocks fall back to the live, not retained rank. The retained blocks are counted as they are
now on the device (the KV cache counts them for the programs marked retained): blocks evicted
since, or taken back by a call, no longer count. Expiry pops the due deadlines once per round.

Prefetch (`config.prefetch`, with a host tier): an idle program's KV that was offloaded to
host is copied back from the time its next call becomes likely (the `PREFETCH_QUANTILE` of its
class's return times, or its hint, less the copy time; at once before any samples), onto
free blocks only (or ownerless KV): never at the expense of a live program's KV. At most
`PREFETCH_PROGRAMS_PER_ROUND` programs are tried per round, soonest due first; a program
short of blocks is tried again next round, until its next call comes or it ends.

With `kv_memory="lru"` every rank is 0 and admissions may evict anything (plain LRU).
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Callable, Sequence

from kvcache.manager import KVCacheManager
from scheduler.config import SchedulerConfig
from scheduler.deadlines import DeadlineWatch
from scheduler.policies import Policy, Retention
from scheduler.preemption import TransferRates
from scheduler.process_table import CallRecord, ProgramRecord
from scheduler.tool_times import (
    PREFETCH_QUANTILE,
    ToolTimeLearner,
    memory_price,
    retention_value,
)

NO_OWNER_RANK = 0.0
LIVE_MIN_RANK = 1.0  # ranks of live programs' KV start here (see Policy.retention_rank)
UNLIMITED = float("inf")
PREFETCH_PROGRAMS_PER_ROUND = 8


class ProgramMemory:
    """Sets the ranks of programs' cached KV and tracks tool-call retention.

    Owns: the retention records (program id -> deadline, in a DeadlineWatch), the learnt
    return times, and the idle programs to prefetch (with the token ids their KV holds). The
    KV cache owns the blocks; this only re-ranks them through `KVCacheManager.set_rank`, keyed
    by program id, marks retained programs (`set_retained`) so the cache counts their
    blocks, and asks it to `prefetch`. `pressure` is set by the scheduler each round: (calls
    short of blocks, blocks one of them needs).
    """

    def __init__(self, config: SchedulerConfig, kv: KVCacheManager, policy: Policy,
                 num_levels: int, rates: TransferRates) -> None:
        self.enabled = config.kv_memory == "program"
        self.config = config
        self.kv = kv
        self.policy = policy
        self.num_levels = num_levels
        self.ranks_by_level = config.kv_ranks_by_level
        self.budget_blocks = int(config.retention_budget * kv.pool.num_usable)
        self.rates = rates
        self.return_times = ToolTimeLearner()
        self.pressure = (0, 0)
        self._retained = DeadlineWatch()  # program -> the deadline of its retention
        self._prefetch_due = DeadlineWatch()  # idle program -> when to bring its KV back
        self._prefetch_ready: OrderedDict[str, None] = OrderedDict()  # due, in due order
        self._histories: dict[str, Sequence[int]] = {}  # idle program -> its KV's token ids
        self.num_retained = 0
        self.num_retention_expired = 0
        if self.enabled:  # evicted KV of live programs goes to the host tier
            kv.enable_offload(LIVE_MIN_RANK)
        self.prefetching = self.enabled and config.prefetch and kv.offload_min_rank is not None

    @property
    def retained_blocks(self) -> int:
        """Device blocks the retained programs keep now (evicted ones are not counted)."""
        return self.kv.num_retained_blocks

    def rank(self, level: int, retention: Retention) -> float:
        if not self.enabled:
            return NO_OWNER_RANK
        if not self.ranks_by_level:
            level = self.num_levels - 1
        return self.policy.retention_rank(level, self.num_levels, retention)

    def admission_rank(self, level: int) -> float:
        """The highest rank an admission at `level` may evict."""
        return self.rank(level, Retention.QUEUED) if self.enabled else UNLIMITED

    def queued(self, program: ProgramRecord, level: int) -> None:
        """A call of `program` waits at `level`: its KV is retained there (ends any
        tool-call retention, whose place the queued call takes)."""
        if not self.enabled:
            return
        self._release(program.program_id)
        self._forget_prefetch(program.program_id)
        self.kv.set_rank(program.program_id, self.rank(level, Retention.QUEUED))

    def tool_returned(self, program: ProgramRecord, seconds: float) -> None:
        """`program`'s next call came `seconds` after its last one finished."""
        if self.enabled:
            self.return_times.returned(_class_of(program), seconds)

    def free_rank(self, program: ProgramRecord, level: int) -> float:
        """Rank for blocks a call of `program` frees while it still has a call at `level`
        (preempted, or a sibling still active)."""
        return self.rank(level, Retention.QUEUED)

    def finished(self, program: ProgramRecord, call: CallRecord, level: int, num_blocks: int,
                 now: float, token_ids: Sequence[int], calls_in_engine: int) -> float:
        """`call` of `program` finished and leaves `num_blocks` cached blocks of `token_ids`
        (its prompt and output); its next call would enter `level`; `calls_in_engine` are the
        other calls running or queued. Returns the rank for the blocks (QUEUED if the program
        has other active calls, TOOL_CALL if a retention of them and of the program's other
        cached blocks fits the budget, else NONE); those other blocks move to that rank too.
        An idle program's KV is watched for prefetch."""
        if not self.enabled or (program.ephemeral and not program.active_calls):
            return NO_OWNER_RANK
        if program.active_calls:
            return self.rank(level, Retention.QUEUED)
        self._release(program.program_id)
        num_blocks += self.kv.num_kept_blocks_of(program.program_id)
        ttl = self.retention_seconds(program, call, num_blocks, calls_in_engine)
        retained = 0 < ttl and self.retained_blocks + num_blocks <= self.budget_blocks
        if retained:
            deadline = now + ttl
            self._retained.watch(program.program_id, deadline)
            self.kv.set_retained(program.program_id, True)
            self.num_retained += 1
        rank = self.rank(level, Retention.TOOL_CALL if retained else Retention.NONE)
        self.kv.set_rank(program.program_id, rank)
        if self.prefetching:
            self._watch_prefetch(program, call, num_blocks, token_ids, now)
        return rank

    def retention_seconds(self, program: ProgramRecord, call: CallRecord, num_blocks: int,
                          calls_in_engine: int) -> float:
        """How long to retain `program`'s `num_blocks` blocks after `call` (see the module
        docstring), at most `retention_max_seconds`."""
        config = self.config
        times = None
        if call.expected_tool_seconds is None and config.retention_rule == "learnt":
            times = self.return_times.times(_class_of(program))
        if call.expected_tool_seconds is not None:
            expected = config.retention_ttl_factor * call.expected_tool_seconds
        elif times is not None:
            value = retention_value(self._reload_seconds(num_blocks), calls_in_engine)
            expected = times.best_retention(value, memory_price(num_blocks, *self.pressure))
        elif program.num_tool_gaps:
            expected = config.retention_ttl_factor * program.external_time \
                / program.num_tool_gaps
        else:
            expected = config.retention_ttl_factor * config.retention_prior_seconds
        return min(config.retention_max_seconds, expected)

    def _reload_seconds(self, num_blocks: int) -> float:
        """Bringing back `num_blocks` evicted blocks: recomputing them, or (with a host tier)
        copying them back, the cheaper."""
        recompute = self.rates.recompute_seconds(num_blocks * self.kv.block_size)
        if self.kv.offload_min_rank is None:
            return recompute
        return min(recompute, self.rates.swap_seconds(num_blocks) / 2)

    def _watch_prefetch(self, program: ProgramRecord, call: CallRecord, num_blocks: int,
                        token_ids: Sequence[int], now: float) -> None:
        times = self.return_times.times(_class_of(program))
        if call.expected_tool_seconds is not None:
            expected = call.expected_tool_seconds
        else:
            expected = (times.return_quantile(PREFETCH_QUANTILE) if times else None) or 0.0
        lead = self.rates.swap_seconds(num_blocks) / 2
        self._prefetch_due.watch(program.program_id, now + max(0.0, expected - lead))
        self._histories[program.program_id] = token_ids

    def prefetch(self, now: float, level_of: Callable[[str], int | None]
                 ) -> list[tuple[int, int]]:
        """Bring due idle programs' host KV back onto free device blocks (see the module
        docstring); `level_of` as in `expire`. Returns the (host, device) copies for this
        step: call it after the step's last allocation."""
        if not self.prefetching:
            return []
        for program_id in self._prefetch_due.due(now):
            self._prefetch_ready[program_id] = None
        copies: list[tuple[int, int]] = []
        for program_id in list(itertools.islice(self._prefetch_ready,
                                                PREFETCH_PROGRAMS_PER_ROUND)):
            if self.kv.num_evictable_blocks(NO_OWNER_RANK) == 0:
                break
            level = level_of(program_id)
            if level is not None:
                retention = Retention.TOOL_CALL if program_id in self._retained \
                    else Retention.NONE
                copies += self.kv.prefetch(program_id, self._histories[program_id],
                                           self.rank(level, retention))
            if level is None or self.kv.num_evictable_blocks(NO_OWNER_RANK) > 0:
                self._forget_prefetch(program_id)  # all of it is back, or it is gone
        return copies

    def ended(self, program: ProgramRecord, now: float, idle: bool) -> None:
        """The program ended or expired (`idle`: with no call active): its KV is nobody's
        now."""
        if not self.enabled:
            return
        if idle and program.last_call_completion is not None:
            self.return_times.ended(_class_of(program), now - program.last_call_completion)
        self._release(program.program_id)
        self._forget_prefetch(program.program_id)
        self.kv.set_rank(program.program_id, NO_OWNER_RANK)

    def expire(self, now: float, level_of: Callable[[str], int | None]) -> None:
        """End the retention of programs past their deadline; `level_of(program_id)` is the
        level the program's next call would enter (None if it is no longer live)."""
        for program_id in self._retained.due(now):
            self.kv.set_retained(program_id, False)
            self.num_retention_expired += 1
            level = level_of(program_id)
            self.kv.set_rank(program_id, NO_OWNER_RANK if level is None
                             else self.rank(level, Retention.NONE))

    def _release(self, program_id: str) -> None:
        if program_id in self._retained:
            self._retained.forget(program_id)
            self.kv.set_retained(program_id, False)

    def _forget_prefetch(self, program_id: str) -> None:
        if program_id in self._prefetch_due:
            self._prefetch_due.forget(program_id)
        self._prefetch_ready.pop(program_id, None)
        self._histories.pop(program_id, None)


def _class_of(program: ProgramRecord) -> tuple[str | None, str | None]:
    return program.tenant, program.program_class
