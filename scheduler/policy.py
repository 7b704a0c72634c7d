"""Priority policies. A policy says where a new call enters the discretized queues and how a
finished call changes its program's service; batch formation is the same for all of them.

| policy | entry value of a new call | program service after a call |
| --- | --- | --- |
| fcfs | one queue, arrival order | sum |
| las | 0 (request-level: every call starts fresh) | sum |
| mlfq | the queue whose quantum covers the call's first step (FastServe skip-join) | sum |
| plas | the program's summed service | sum |
| atlas | the program's critical path | max(service, start value + call service) |
| oracle | the program's remaining work (told, not learnt); never demoted | sum |
"""

from __future__ import annotations

from scheduler.process_table import CallRecord, ProgramRecord


class Policy:
    """Defaults are PLAS-like accounting; subclasses override what differs."""

    name = ""
    uses_levels = True        # K queues and priority preemption between them
    demotes = True            # a call drops a level when it uses up its quantum
    guards_starvation = True  # anti-starvation promotion (when the config turns it on)
    skip_join = False         # enter by the first step's service (MLFQ)

    def start_value(self, program: ProgramRecord) -> float:
        """Priority value a new call of `program` starts from."""
        return program.service

    def order(self, program: ProgramRecord, call: CallRecord, seq: int) -> tuple:
        """Sort key inside every level, fixed when the call arrives (`seq` counts arrivals):
        FCFS by arrival, so a demoted or promoted call keeps its place among its peers."""
        return (call.arrival, seq)

    def complete(self, program: ProgramRecord, call: CallRecord) -> None:
        """Fold a finished call's service into its program's."""
        program.service += call.total_service


class FCFSPolicy(Policy):
    name = "fcfs"
    uses_levels = False

    def start_value(self, program: ProgramRecord) -> float:
        return 0.0


class LASPolicy(Policy):
    name = "las"

    def start_value(self, program: ProgramRecord) -> float:
        return 0.0


class MLFQPolicy(LASPolicy):
    name = "mlfq"
    skip_join = True


class PLASPolicy(Policy):
    name = "plas"


class ATLASPolicy(Policy):
    name = "atlas"

    def complete(self, program: ProgramRecord, call: CallRecord) -> None:
        program.service = max(program.service, call.start_value + call.total_service)


class OraclePolicy(Policy):
    """Clairvoyant shortest-remaining-program-first: a call enters the level of its program's
    remaining work (`ProgramRecord.oracle_work`, the program's total service told in advance,
    less the service it has had; programs without it go last) and is ordered by it inside the
    level. No demotion (running shortens the remaining work, it never lengthens it) and no
    anti-starvation: it is the reference, not a fair policy. It preempts lower levels like
    the other level policies."""

    name = "oracle"
    demotes = False
    guards_starvation = False

    def start_value(self, program: ProgramRecord) -> float:
        return self._remaining(program)

    def order(self, program: ProgramRecord, call: CallRecord, seq: int) -> tuple:
        return (self._remaining(program), seq)

    @staticmethod
    def _remaining(program: ProgramRecord) -> float:
        if program.oracle_work is None:
            return float("inf")
        return max(0.0, program.oracle_work - program.service)


POLICIES = {p.name: p for p in (FCFSPolicy, LASPolicy, MLFQPolicy, PLASPolicy, ATLASPolicy,
                                OraclePolicy)}


def make_policy(name: str) -> Policy:
    if name not in POLICIES:
        raise ValueError(f"policy must be one of {sorted(POLICIES)}, got {name!r}")
    return POLICIES[name]()
