"""Program-level FCFS (Continuum's order): one level, calls ordered by their program's start
time, then by their own arrival. A tree's next-level calls therefore go ahead of every call
of programs that started later, so programs finish one after another instead of side by side
(call-level `fcfs` queues them behind later programs' calls: processor sharing again)."""

from __future__ import annotations

from scheduler.policies.base import Policy
from scheduler.process_table import CallRecord, ProgramRecord


class ProgramFCFSPolicy(Policy):
    name = "pfcfs"

    def num_levels(self, configured: int) -> int:
        return 1

    def order(self, program: ProgramRecord, call: CallRecord, seq: int) -> tuple:
        return (program.started, call.arrival, seq)
