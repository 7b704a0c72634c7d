"""ProgramFold: programs' service folded over calls that ran on any engine.

A router in front of several replicas keeps one record per program (a `ProcessTable`, the
same table an engine keeps) and folds each finished call into it with the replicas' own
policy (`Policy.complete`: PLAS sums, ATLAS keeps the critical path), from the service and
wait the replica reported for the call. The value it sends with a call (the record's
`service` when the call arrives) is then what one engine running all of the program's calls
would have used. `server.router.programs.RouterPrograms` builds on it, and so does the
multi-engine simulator (`bench.sim.multi_sim`), which sends that value with every call as
the router does. Torch-free.
"""

from __future__ import annotations

from scheduler.config import SchedulerConfig
from scheduler.policies import Policy
from scheduler.process_table import CallRecord, ProcessTable, ProgramRecord


class ProgramFold:
    """The global program records (one owner, no locks)."""

    def __init__(self, config: SchedulerConfig | None = None, policy: Policy | None = None
                 ) -> None:
        config = config or SchedulerConfig()
        self.table = ProcessTable(config.program_ttl, config.tenant_halflife,
                                  config.program_service_halflife, config.max_programs,
                                  config.max_programs_per_tenant, config.max_tenants)
        self.policy = policy or Policy()

    def start(self, now: float, program_id: str, tenant: str | None,
              program_class: str | None = None) -> None:
        """A new active program (ProgramExistsError, ProgramLimitError as the table says)."""
        self.table.start(now, program_id, tenant, program_class=program_class)

    def begin_call(self, now: float, program_id: str, call_id: str, thread_id: str | None,
                   prompt_tokens: int) -> tuple[CallRecord, float]:
        """Count a call arriving (`program_id` must be active): returns its record and the
        priority value to send with it (the program's service after the table's floors and
        decay), which is also the call's start value for the fold."""
        record = CallRecord(call_id, program_id, thread_id, now)
        self.table.add_call(record, prompt_tokens)
        program = self.table.get(program_id)
        record.start_value = self.policy.start_value(program)
        return record, program.service

    def finish_call(self, now: float, record: CallRecord, service: float, wait: float,
                    generated_tokens: int) -> None:
        """Fold a call that ended with a final message (any finish reason) into its program
        (nothing if the program has ended meanwhile)."""
        if record.program_id not in self.table:
            return
        record.total_service = record.service = service
        record.total_wait = record.wait = wait
        self.policy.complete(self.table.get(record.program_id), record)
        self.table.complete_call(record, now, generated_tokens)

    def end(self, now: float, program_id: str, failed: bool = False) -> ProgramRecord:
        """End the program (its final record; again for a recently ended one)."""
        return self.table.end(program_id, failed, now)
