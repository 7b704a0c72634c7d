"""Gittins (learnt): each call ranks by the Gittins index of its program's attained service,
computed from the sizes of finished programs (see `scheduler.gittins`).

- Size and attained service are ATLAS's units: a program's critical path of service (the sum
  for a sequential program), so a call's attained service is its start value plus its own
  service so far. A finished program is one sample, weighted 1 / its generated tokens: the
  index targets the mean normalised latency.
- Learnt per class (the program's tenant and its client-given `program_class`) from the last
  `window` programs of the class; a class with fewer than `min_samples` uses every class's
  samples; with fewer than that overall, every call waits in the last level, in the order
  below: program FCFS. (ATLAS's order there was measured worse: it runs programs side by
  side, so the first ones finish late and the learner waits for its samples while the
  queue grows; program FCFS finishes programs soonest. Measured on a LATS burst before
  later simulator changes, not re-run: bench/RESULTS_ARCHIVE.md, "Side by side on the
  issue's two traces", stale.)
- The index is binned into the scheduler's levels by its log range over every class's
  table (highest index at level 0; one range, so classes compare), so quanta, priority
  preemption, anti-starvation and the retention ranks work unchanged. A call moves up as
  soon as its index rises (alike programs: the most-served goes first, program FCFS) and
  down once it has used its level's quantum (heavy tails: LAS).
- Inside a level, calls go in their program's start order, then arrival order (program
  FCFS). Ordering them by their program's index at arrival instead (tried in session 4)
  won on replayed bursts but lost ShareGPT's steady state at 8 programs/s (one long
  conversation left unfinished: bench/notes/2026-12-01-learnt-scheduling.md, session 6), so
  it was undone.

Cost: a bisect per charged call per step; a table is rebuilt when an eighth of its samples
are new (one numpy pass per grid point), never per step.
"""

from __future__ import annotations

from scheduler.gittins import SizeLearner
from scheduler.policies.atlas import ATLASPolicy
from scheduler.process_table import CallRecord, ProgramRecord
from scheduler.queues import QueueLevels


class GittinsPolicy(ATLASPolicy):
    name = "gittins"

    def __init__(self, window: int = 1000, min_samples: int = 16) -> None:
        self.learner = SizeLearner(window, min_samples)

    def _level(self, program: ProgramRecord, attained: float, levels: QueueLevels
               ) -> int | None:
        return self.learner.level((program.tenant, program.program_class), attained,
                                  levels.num_queues)

    def entry_level(self, program: ProgramRecord, levels: QueueLevels) -> int:
        level = self._level(program, program.service, levels)
        return levels.num_queues - 1 if level is None else level

    def order(self, program: ProgramRecord, call: CallRecord, seq: int) -> tuple:
        return (program.started, call.arrival, seq)

    def charge(self, program: ProgramRecord, call: CallRecord, service: float,
               levels: QueueLevels) -> int:
        level = self.learner.level((program.tenant, program.program_class),
                                   call.start_value + call.total_service, levels.num_queues)
        if level is None:
            return call.queue
        call.quantum_left -= service
        if level > call.queue and call.quantum_left > 0:
            return call.queue  # a demotion waits for the quantum (a promoted call keeps it)
        if level != call.queue:
            call.quantum_left = levels.quantum(level)
        return level

    def program_ended(self, program: ProgramRecord, now: float) -> None:
        if program.service > 0:
            self.learner.observe((program.tenant, program.program_class), program.service,
                                 1.0 / max(1, program.generated_tokens))
