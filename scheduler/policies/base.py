"""The policy interface: everything that differs between scheduling policies, in one object.

Batch formation, preemption mechanics and memory are the same for every policy (see
`scheduler.scheduler`); a policy decides only what is below. Defaults are PLAS: a new call
enters at its program's summed service, FCFS inside a level, demoted one level each time it
uses up its level's quantum; the lowest-priority running call of a strictly lower level is
preempted for a higher-priority call; anti-starvation watches every call below the top level;
cached KV is ranked by the level the program's next call enters.
"""

from __future__ import annotations

import enum
from collections.abc import Container

from scheduler.process_table import CallRecord, ProgramRecord
from scheduler.queues import LevelQueues, QueueLevels
from scheduler.starvation import crossing_time


class Retention(enum.IntEnum):
    """How much a live program's cached KV is wanted, inside its priority level."""

    NONE = 0       # no call waiting, no retention time left
    QUEUED = 1     # a call of the program waits (or was preempted)
    TOOL_CALL = 2  # between calls, within its retention time and the budget


NUM_RETENTIONS = len(Retention)  # an enum's members are fixed: counted once


class Policy:
    name = ""

    def num_levels(self, configured: int) -> int:
        """How many queue levels the policy uses, given `num_queues`."""
        return configured

    def start_value(self, program: ProgramRecord) -> float:
        """Priority value a new call of `program` starts from."""
        return program.service

    def entry_level(self, program: ProgramRecord, levels: QueueLevels) -> int:
        """The level a new call of `program` enters."""
        return levels.level_of(self.start_value(program))

    def order(self, program: ProgramRecord, call: CallRecord, seq: int) -> tuple:
        """Sort key inside every level, fixed when the call arrives (`seq` counts arrivals):
        FCFS by arrival, so a demoted or promoted call keeps its place among its peers."""
        return (call.arrival, seq)

    def charge(self, program: ProgramRecord, call: CallRecord, service: float,
               levels: QueueLevels) -> int:
        """Take `service` (just charged to `call`, of `program`) off its quantum; returns its
        new level (demoted once per quantum used up, never past the last level)."""
        call.quantum_left -= service
        if call.quantum_left > 0:  # the common case: quantum left, no demotion
            return call.queue
        return self.demoted_level(call, call.queue, levels)

    @staticmethod
    def demoted_level(call: CallRecord, level: int, levels: QueueLevels) -> int:
        """`level`, moved down one level per quantum `call` has overdrawn (refilling
        `quantum_left` from each level passed)."""
        while call.quantum_left <= 0 and level < levels.num_queues - 1:
            level += 1
            call.quantum_left += levels.quantum(level)
        return level

    def complete(self, program: ProgramRecord, call: CallRecord) -> None:
        """Fold a finished call's service into its program's."""
        program.service += call.total_service

    def program_ended(self, program: ProgramRecord, now: float) -> None:
        """See a program's final record as it ends (completed, failed or expired): a policy
        that learns from finished programs does it here (the default learns nothing)."""

    def priority_victim(self, running: LevelQueues, level: int,
                        skip: Container[str]) -> str | None:
        """The running call to preempt for a call of `level`, or None: the last call of the
        lowest level strictly below `level`, except those in `skip`."""
        return running.lowest(below=level, skip=skip)

    def starvation_deadline(self, program: ProgramRecord, call: CallRecord,
                            beta: float) -> float | None:
        """When a waiting call below the top level is due for promotion (None: never)."""
        return crossing_time(program, call, beta)

    def retention_rank(self, level: int, num_levels: int, retention: Retention) -> float:
        """Rank of a live program's cached KV whose next call enters `level` (higher ranks are
        evicted later; 0 is for KV no live program owns): levels apart, the higher priority
        ranks above; inside a level, by `retention`."""
        return 1.0 + NUM_RETENTIONS * (num_levels - 1 - level) + retention
