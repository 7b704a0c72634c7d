"""RouterPrograms: the router's global accounting of programs, over every replica.

The records and their fold are `scheduler.program_fold.ProgramFold`'s: a
`scheduler.process_table.ProcessTable` (the same table an engine keeps: service, wait,
external time, call and token counts, TTL expiry, tenant accounting and the program caps),
and a finished call is folded into its program by the replicas' own scheduling policy
(`Policy.complete`, e.g. PLAS sums, ATLAS keeps the critical path
`max(service, start value + call service)`), from the call's `usage.service_seconds` and
`usage.queue_seconds` as the replica reported them. So the value the router sends with a
call (`program_priority`, the record's `service` when the call arrives) is what a single
engine running all of the program's calls would have used.

Beside each record: the replicas the program was started on (it is started lazily on each
replica that gets one of its calls, with the same id, tenant and class, and ended on all of
them at its end) and `engine`, the replica of its latest call. Ids here are the router's inner ids
(server/namespace.py: `TENANT/ID` with auth on).

A call lost with its replica mid-stream (the client is told UNAVAILABLE and may retry it
with the same id) is taken back: it is not counted (calls, prompt tokens) and charges
nothing, since its service died with the replica; its retry counts as the call.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from scheduler.config import SchedulerConfig
from scheduler.policies import POLICIES, Policy, make_policy
from scheduler.process_table import CallRecord, ProgramRecord
from scheduler.program_fold import ProgramFold


@dataclass
class Routed:
    """Router-side facts of one program: where it lives, as the client names it, and the
    replicas it may not use (they forgot it and cannot take its id again)."""

    outer_id: str
    tenant: str | None
    started_on: set[int] = field(default_factory=set)
    barred: set[int] = field(default_factory=set)


def policy_for(name: str) -> Policy:
    """The fold of the replicas' policy `name` (ModelInfo.policy); a policy the router does
    not know (a custom class on the replicas) folds as a sum, like the base Policy."""
    return make_policy(name) if name in POLICIES else Policy()


class RouterPrograms(ProgramFold):
    """The router's program records (one asyncio loop owns it: no locks): the fold of
    `ProgramFold`, and where each program lives."""

    def __init__(self, config: SchedulerConfig | None = None, policy: Policy | None = None
                 ) -> None:
        super().__init__(config, policy)
        self.routed: dict[str, Routed] = {}

    def start(self, now: float, program_id: str, outer_id: str, tenant: str | None,
              program_class: str | None = None) -> None:
        """A new active program (ProgramExistsError, ProgramLimitError as the table says);
        its record keeps `program_class`, which the replicas get when it starts there."""
        super().start(now, program_id, tenant, program_class)
        self.routed[program_id] = Routed(outer_id, tenant)

    def get(self, program_id: str) -> ProgramRecord:
        """The live record (UnknownProgramError for an unknown or ended id)."""
        return self.table.get(program_id)

    def placed(self, program_id: str, replica: int) -> None:
        if program_id in self.table:
            self.table.get(program_id).engine = replica

    def drop_call(self, now: float, record: CallRecord, prompt_tokens: int,
                  counted: bool) -> None:
        """A call that ended without a final message: charge nothing; with `counted=False`
        (lost with its replica; the client may retry it) take back its counts too."""
        if record.program_id not in self.table:
            return
        program = self.table.get(record.program_id)
        self.table.complete_call(record, now, 0)
        if not counted:
            program.num_calls -= 1
            program.prompt_tokens -= prompt_tokens

    def end(self, now: float, program_id: str, failed: bool) -> ProgramRecord:
        """End the program (its final record; again for a recently ended one)."""
        record = super().end(now, program_id, failed)
        self.routed.pop(program_id, None)
        return record

    def replica_lost(self, replica: int) -> None:
        """The replica is gone with its programs: start them again there if it comes back."""
        for routed in self.routed.values():
            routed.started_on.discard(replica)

    def expire(self, now: float) -> list[tuple[ProgramRecord, Routed]]:
        """Programs past their TTL, with where they live (to end them there too)."""
        return [(record, self.routed.pop(record.program_id))
                for record in self.table.expire(now) if record.program_id in self.routed]

    def top(self, limit: int, tenant: str | None) -> list[ProgramRecord]:
        return self.table.top_by_service(limit, tenant)
