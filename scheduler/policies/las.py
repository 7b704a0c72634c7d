"""Request-level least attained service: every call starts fresh at the top level."""

from __future__ import annotations

from scheduler.policies.base import Policy
from scheduler.process_table import ProgramRecord


class LASPolicy(Policy):
    name = "las"

    def start_value(self, program: ProgramRecord) -> float:
        return 0.0
