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

Tool-call retention: when a program's last active call finishes, its KV is retained for
`retention_ttl_factor` x the expected tool time (the call's hint, else the program's mean
observed gap, else `retention_prior_seconds`), capped by `retention_max_seconds`, while the
retained blocks of all programs stay within `retention_budget` of the pool; past either, the
blocks fall back to the live, not retained rank. The retained blocks are counted as they are
now on the device (the KV cache counts them for the programs marked retained): blocks evicted
since, or taken back by a call, no longer count. Expiry pops the due deadlines once per round.

With `kv_memory="lru"` every rank is 0 and admissions may evict anything (plain LRU).
"""

from __future__ import annotations

from collections.abc import Callable

from kvcache.manager import KVCacheManager
from scheduler.config import SchedulerConfig
from scheduler.deadlines import DeadlineWatch
from scheduler.policies import Policy, Retention
from scheduler.process_table import CallRecord, ProgramRecord

NO_OWNER_RANK = 0.0
LIVE_MIN_RANK = 1.0  # ranks of live programs' KV start here (see Policy.retention_rank)
UNLIMITED = float("inf")


class ProgramMemory:
    """Sets the ranks of programs' cached KV and tracks tool-call retention.

    Owns: the retention records (program id -> deadline, in a DeadlineWatch). The KV cache
    owns the blocks; this only re-ranks them through `KVCacheManager.set_rank`, keyed by
    program id, and marks retained programs (`set_retained`) so the cache counts their
    blocks.
    """

    def __init__(self, config: SchedulerConfig, kv: KVCacheManager, policy: Policy,
                 num_levels: int) -> None:
        self.enabled = config.kv_memory == "program"
        self.config = config
        self.kv = kv
        self.policy = policy
        self.num_levels = num_levels
        self.budget_blocks = int(config.retention_budget * kv.pool.num_usable)
        self._retained = DeadlineWatch()  # program -> the deadline of its retention
        self.num_retained = 0
        self.num_retention_expired = 0
        if self.enabled:  # evicted KV of live programs goes to the host tier
            kv.enable_offload(LIVE_MIN_RANK)

    @property
    def retained_blocks(self) -> int:
        """Device blocks the retained programs keep now (evicted ones are not counted)."""
        return self.kv.num_retained_blocks

    def rank(self, level: int, retention: Retention) -> float:
        if not self.enabled:
            return NO_OWNER_RANK
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
        self.kv.set_rank(program.program_id, self.rank(level, Retention.QUEUED))

    def free_rank(self, program: ProgramRecord, level: int) -> float:
        """Rank for blocks a call of `program` frees while it still has a call at `level`
        (preempted, or a sibling still active)."""
        return self.rank(level, Retention.QUEUED)

    def finished(self, program: ProgramRecord, call: CallRecord, level: int, num_blocks: int,
                 now: float) -> float:
        """`call` of `program` finished and leaves `num_blocks` cached blocks; its next call
        would enter `level`. Returns the rank for them (QUEUED if the program has other
        active calls, TOOL_CALL if a retention of them and of the program's other cached
        blocks fits the budget, else NONE); those other blocks move to that rank too."""
        if not self.enabled or (program.ephemeral and not program.active_calls):
            return NO_OWNER_RANK
        if program.active_calls:
            return self.rank(level, Retention.QUEUED)
        self._release(program.program_id)
        ttl = self.retention_seconds(program, call)
        num_blocks += self.kv.num_kept_blocks_of(program.program_id)
        retained = 0 < ttl and self.retained_blocks + num_blocks <= self.budget_blocks
        if retained:
            deadline = now + ttl
            self._retained.watch(program.program_id, deadline)
            self.kv.set_retained(program.program_id, True)
            self.num_retained += 1
        rank = self.rank(level, Retention.TOOL_CALL if retained else Retention.NONE)
        self.kv.set_rank(program.program_id, rank)
        return rank

    def retention_seconds(self, program: ProgramRecord, call: CallRecord) -> float:
        """How long to retain `program`'s KV after `call`: the TTL factor times the expected
        tool time, at most `retention_max_seconds`."""
        if call.expected_tool_seconds is not None:
            expected = call.expected_tool_seconds
        elif program.num_tool_gaps:
            expected = program.external_time / program.num_tool_gaps
        else:
            expected = self.config.retention_prior_seconds
        return min(self.config.retention_max_seconds,
                   self.config.retention_ttl_factor * expected)

    def ended(self, program_id: str) -> None:
        """The program ended or expired: its KV is nobody's now."""
        if not self.enabled:
            return
        self._release(program_id)
        self.kv.set_rank(program_id, NO_OWNER_RANK)

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
