"""ATLAS (parallel programs): a call starts from its program's critical path of service, and
a finished call extends it: service = max(service, start value + call service)."""

from __future__ import annotations

from scheduler.policies.base import Policy
from scheduler.process_table import CallRecord, ProgramRecord


class ATLASPolicy(Policy):
    name = "atlas"

    def complete(self, program: ProgramRecord, call: CallRecord) -> None:
        program.service = max(program.service, call.start_value + call.total_service)
