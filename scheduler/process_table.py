"""The process table: one record per agent program, with its service, wait and active calls.

Programs start and end explicitly; a program that neither ends nor calls again within
`program_ttl` seconds of its last activity expires. Ended and expired records leave the table
at once (the caller gets the final record), so the table never grows without bound; the last
`RECENTLY_ENDED` final records are remembered so that ending a program twice is harmless.
"""

from __future__ import annotations

import enum
import heapq
import itertools
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable

RECENTLY_ENDED = 4096


class ProgramState(enum.Enum):
    ACTIVE = "active"
    COMPLETED = "completed"
    FAILED = "failed"
    EXPIRED = "expired"


class ProgramExistsError(ValueError):
    """A proposed program id is taken (active, or recently ended)."""


class UnknownProgramError(KeyError):
    """No active program has this id (never started, ended or expired)."""

    def __str__(self) -> str:
        return f"program_id {self.args[0]!r} is not an active program"


@dataclass
class CallRecord:
    """One active call of a program, as the scheduler sees it.

    `wait` and `service` are the call's own W and T (anti-starvation resets both);
    `total_wait` and `total_service` are never reset; `waiting_since` is set while it waits.
    `start_value` is the program value the call started from
    (ATLAS adds `total_service` to it on completion). `quantum_left` is what the call may use
    before it is demoted from `queue`. `promoted` is set by anti-starvation until the call next
    starts running: it goes first, but does not preempt anyone to get in.
    `expected_tool_seconds` is the client's hint of the tool time after this call.
    """

    call_id: str
    program_id: str
    thread_id: str | None
    arrival: float
    queue: int = 0
    quantum_left: float = 0.0
    start_value: float = 0.0
    order: tuple = ()
    wait: float = 0.0
    service: float = 0.0
    total_wait: float = 0.0
    total_service: float = 0.0
    waiting_since: float | None = None
    num_steps: int = 0
    promoted: bool = False
    expected_tool_seconds: float | None = None


@dataclass
class ProgramRecord:
    program_id: str
    tenant: str | None
    started: float
    state: ProgramState = ProgramState.ACTIVE
    service: float = 0.0
    wait: float = 0.0
    active_calls: dict[str, CallRecord] = field(default_factory=dict)
    engine: int | None = None
    last_call_arrival: float | None = None
    last_call_completion: float | None = None
    num_calls: int = 0
    prompt_tokens: int = 0
    generated_tokens: int = 0
    swap_time: float = 0.0
    external_time: float = 0.0
    num_tool_gaps: int = 0  # idle gaps between calls that external_time sums
    oracle_work: float | None = None
    ephemeral: bool = False
    floor: float = 0.0  # service it started from (its tenant's recent service)

    @property
    def last_activity(self) -> float:
        return max(self.started, self.last_call_arrival or 0.0, self.last_call_completion or 0.0)


class ProcessTable:
    """Program records keyed by id. Idle records (no active call) are kept in order of last
    activity, so expiry pops only what has expired.

    Tenant accounting (anti-gaming), on when `tenant_halflife` is set: each tenant keeps its
    recent service, the service of its ended programs decaying with that half-life; a new
    program of the tenant starts from it (`floor`), so opening a fresh program for every call
    does not reset a client's priority.

    Service half-life, on when `service_halflife` is set: while a program is idle (between
    calls) its attained service (above its tenant floor) decays with that half-life, applied when its next call
    arrives, so a long-lived session regains priority the way a tenant's record does.
    """

    def __init__(self, program_ttl: float, tenant_halflife: float | None = None,
                 service_halflife: float | None = None) -> None:
        if program_ttl <= 0:
            raise ValueError(f"program_ttl must be positive, got {program_ttl}")
        self.program_ttl = program_ttl
        self.tenant_halflife = tenant_halflife
        self.service_halflife = service_halflife
        self._tenants: dict[str, tuple[float, float]] = {}  # tenant -> (service, as of)
        self._programs: dict[str, ProgramRecord] = {}
        self._idle: OrderedDict[str, None] = OrderedDict()
        self._ended: OrderedDict[str, ProgramRecord] = OrderedDict()
        self._ids = itertools.count()
        self._on_end: Callable[[ProgramRecord, float], None] | None = None

    def on_end(self, callback: Callable[[ProgramRecord, float], None] | None) -> None:
        """Call `callback(record, now)` once for each program that ends (completed, failed
        or expired), after its final record is fixed (None: no callback)."""
        self._on_end = callback

    def __len__(self) -> int:
        return len(self._programs)

    def __contains__(self, program_id: str) -> bool:
        return program_id in self._programs

    def start(self, now: float, program_id: str | None = None, tenant: str | None = None,
              ephemeral: bool = False) -> ProgramRecord:
        """A new active record. An `ephemeral` program (a call made without one) is ended by
        the scheduler when its call completes."""
        if program_id is None:
            program_id = f"prog-{next(self._ids)}"
            while program_id in self._programs:
                program_id = f"prog-{next(self._ids)}"
        elif not isinstance(program_id, str) or not program_id:
            raise ValueError(f"program_id must be a non-empty string, got {program_id!r}")
        elif program_id in self._programs or program_id in self._ended:
            raise ProgramExistsError(f"program_id {program_id!r} is already in use")
        record = ProgramRecord(program_id, tenant, now, ephemeral=ephemeral)
        record.service = record.floor = self.tenant_service(tenant, now)
        self._programs[program_id] = record
        self._idle[program_id] = None
        return record

    def top_by_service(self, limit: int, tenant: str | None = None) -> list[ProgramRecord]:
        """Up to `limit` active records with the most service, most first (only `tenant`'s
        when it is given)."""
        records = (r for r in self._programs.values() if tenant is None or r.tenant == tenant)
        return heapq.nlargest(limit, records, key=lambda r: r.service)

    def get(self, program_id: str) -> ProgramRecord:
        try:
            return self._programs[program_id]
        except KeyError:
            raise UnknownProgramError(program_id) from None

    def add_call(self, record: CallRecord, prompt_tokens: int) -> None:
        program = self.get(record.program_id)
        if program.last_call_completion is not None and not program.active_calls:
            idle = max(0.0, record.arrival - program.last_call_completion)
            program.external_time += idle
            program.num_tool_gaps += 1
            if self.service_halflife:
                own = max(0.0, program.service - program.floor)
                program.service = program.floor + own * 0.5 ** (idle / self.service_halflife)
        program.active_calls[record.call_id] = record
        program.last_call_arrival = record.arrival
        program.num_calls += 1
        program.prompt_tokens += prompt_tokens
        self._idle.pop(record.program_id, None)

    def complete_call(self, record: CallRecord, now: float, generated_tokens: int) -> None:
        """Drop a finished or aborted call from its program's active calls."""
        program = self._programs.get(record.program_id)
        if program is None or program.active_calls.pop(record.call_id, None) is None:
            return
        program.last_call_completion = now
        program.generated_tokens += generated_tokens
        program.wait += record.total_wait
        if not program.active_calls:
            self._idle[record.program_id] = None

    def tenant_service(self, tenant: str | None, now: float) -> float:
        """The tenant's recent service, decayed to `now` (0 without tenant accounting)."""
        if tenant is None or not self.tenant_halflife or tenant not in self._tenants:
            return 0.0
        service, as_of = self._tenants[tenant]
        return service * 0.5 ** (max(0.0, now - as_of) / self.tenant_halflife)

    def _credit_tenant(self, record: ProgramRecord, now: float) -> None:
        if record.tenant is not None and self.tenant_halflife:
            own = max(0.0, record.service - record.floor)
            self._tenants[record.tenant] = (self.tenant_service(record.tenant, now) + own, now)

    def end(self, program_id: str, failed: bool = False, now: float = 0.0) -> ProgramRecord:
        """Remove the program and return its final record; the caller has already finished
        its active calls. Ending a recently ended program returns the same final record."""
        record = self._programs.pop(program_id, None)
        if record is None:
            if program_id in self._ended:
                return self._ended[program_id]
            raise UnknownProgramError(program_id)
        self._idle.pop(program_id, None)
        record.state = ProgramState.FAILED if failed else ProgramState.COMPLETED
        self._credit_tenant(record, now)
        self._remember(record, now)
        return record

    def _remember(self, record: ProgramRecord, now: float) -> None:
        self._ended[record.program_id] = record
        if self._on_end is not None:
            self._on_end(record, now)
        if len(self._ended) > RECENTLY_ENDED:
            self._ended.popitem(last=False)

    def is_recently_ended(self, program_id: str) -> bool:
        return program_id in self._ended

    def expire(self, now: float) -> list[ProgramRecord]:
        """Remove idle programs whose last activity is `program_ttl` or more ago."""
        expired = []
        while self._idle:
            program_id = next(iter(self._idle))
            record = self._programs[program_id]
            if record.last_activity + self.program_ttl > now:
                break
            del self._idle[program_id]
            del self._programs[program_id]
            record.state = ProgramState.EXPIRED
            self._credit_tenant(record, now)
            self._remember(record, now)
            expired.append(record)
        return expired

    def check_integrity(self, active_call_ids: set[str]) -> None:
        """Every active call of every program is live in the scheduler, and vice versa."""
        recorded = {c for p in self._programs.values() for c in p.active_calls}
        if recorded != active_call_ids:
            raise RuntimeError(f"process table and scheduler disagree on calls: "
                               f"{sorted(recorded ^ active_call_ids)[:5]}")
        idle = {p for p, r in self._programs.items() if not r.active_calls}
        if idle != set(self._idle):
            raise RuntimeError("process table idle list is out of date")
