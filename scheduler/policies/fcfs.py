"""FCFS: one queue in arrival order (no levels, so no demotion or priority preemption)."""

from __future__ import annotations

from scheduler.policies.base import Policy


class FCFSPolicy(Policy):
    name = "fcfs"

    def num_levels(self, configured: int) -> int:
        return 1
