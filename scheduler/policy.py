"""Priority policies. A policy gives each call a sort key (smaller runs first) and hears
about arrivals, service received and completions; batch formation is policy-agnostic."""

from __future__ import annotations

from abc import ABC, abstractmethod

from scheduler.call_state import SchedulableCall


class Policy(ABC):
    name: str

    @abstractmethod
    def priority(self, call: SchedulableCall) -> tuple:
        """Sort key; smaller is served first. Must be a total order (break ties)."""

    def on_arrival(self, call: SchedulableCall, now: float) -> None:
        """A call entered the scheduler."""

    def on_service(self, call: SchedulableCall, service: float, now: float) -> None:
        """`call` took part in a step and is charged `service` (seconds or tokens)."""

    def on_complete(self, call: SchedulableCall, now: float) -> None:
        """`call` finished or was aborted; it leaves the scheduler."""


class FCFSPolicy(Policy):
    """First come, first served: by arrival time, then arrival order."""

    name = "fcfs"

    def priority(self, call: SchedulableCall) -> tuple:
        return (call.arrival_time, call.arrival_index)


def make_policy(name: str) -> Policy:
    policies = {FCFSPolicy.name: FCFSPolicy}
    if name not in policies:
        raise ValueError(f"policy must be one of {sorted(policies)}, got {name!r}")
    return policies[name]()
