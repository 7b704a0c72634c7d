"""Clairvoyant shortest-remaining-program-first (simulation and tests only).

A call enters the level of its program's remaining work (`ProgramRecord.oracle_work`, the
program's total service told in advance, less the service it has had; programs without it go
last) and is ordered by it inside the level. No demotion (running shortens the remaining
work, it never lengthens it) and no anti-starvation: it is the reference, not a fair policy.
It preempts lower levels like the other level policies.
"""

from __future__ import annotations

from scheduler.policies.base import Policy
from scheduler.process_table import CallRecord, ProgramRecord
from scheduler.queues import QueueLevels


class OraclePolicy(Policy):
    name = "oracle"

    def start_value(self, program: ProgramRecord) -> float:
        return self._remaining(program)

    def order(self, program: ProgramRecord, call: CallRecord, seq: int) -> tuple:
        return (self._remaining(program), seq)

    def charge(self, program: ProgramRecord, call: CallRecord, service: float,
               levels: QueueLevels) -> int:
        return call.queue

    def starvation_deadline(self, program: ProgramRecord, call: CallRecord,
                            beta: float) -> float | None:
        return None

    @staticmethod
    def _remaining(program: ProgramRecord) -> float:
        if program.oracle_work is None:
            return float("inf")
        return max(0.0, program.oracle_work - program.service)
