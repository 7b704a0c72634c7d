"""FastServe-style request-level MLFQ with skip-join: a call starts fresh and, on its first
step, joins the first level whose quantum covers that step's service."""

from __future__ import annotations

from scheduler.policies.base import Policy
from scheduler.process_table import CallRecord, ProgramRecord
from scheduler.queues import QueueLevels


class MLFQPolicy(Policy):
    name = "mlfq"

    def start_value(self, program: ProgramRecord) -> float:
        return 0.0

    def charge(self, program: ProgramRecord, call: CallRecord, service: float,
               levels: QueueLevels) -> int:
        if call.num_steps > 1:
            return super().charge(program, call, service, levels)
        level = next((i for i in range(levels.num_queues) if levels.quantum(i) >= service),
                     levels.num_queues - 1)
        call.quantum_left = levels.quantum(level) - service
        return self.demoted_level(call, level, levels)
