"""The process table: one record per agent program, with its service, wait and active calls.

Programs start and end explicitly; a program that neither ends nor calls again within
`program_ttl` seconds of its last activity expires. Ended and expired records leave the table
at once (the caller gets the final record), so the table never grows without bound; the last
`RECENTLY_ENDED` final records are remembered so that ending a program twice is harmless.
Active programs are bounded in all (`max_programs`) and per tenant (`max_programs_per_tenant`),
and tenant service records (`max_tenants`), see ProcessTable.
"""

from __future__ import annotations

import enum
import heapq
import itertools
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable

from scheduler.config import SchedulerConfig
from scheduler.ids import short

RECENTLY_ENDED = 4096
# A tenant record not credited for this many half-lives has decayed below 2**-30 (about 1e-9)
# of its value then, so dropping it moves no future floor by more than that fraction.
PRUNE_HALFLIVES = 30
_DEFAULTS = SchedulerConfig()


class ProgramState(enum.Enum):
    ACTIVE = "active"
    COMPLETED = "completed"
    FAILED = "failed"
    EXPIRED = "expired"


class ProgramExistsError(ValueError):
    """A proposed program id (`args[0]`) is taken (active, or recently ended)."""

    def __str__(self) -> str:
        return f"program_id {short(self.args[0])} is already in use"


class ProgramLimitError(Exception):
    """Starting one more program would pass `max_programs` or `max_programs_per_tenant`; the
    message names the limit and its value. Not a ValueError: the request is well formed, the
    engine is full (RESOURCE_EXHAUSTED on the wire)."""


class UnknownProgramError(KeyError):
    """No active program has this id (never started, ended or expired)."""

    def __str__(self) -> str:
        return f"program_id {short(self.args[0])} is not an active program"


@dataclass
class CallRecord:
    """One active call of a program, as the scheduler sees it.

    `wait` and `service` are the call's own W and T (anti-starvation resets both);
    `total_wait` and `total_service` are never reset; `waiting_since` is set while it waits.
    `start_value` is the program value the call started from
    (ATLAS adds `total_service` to it on completion). `quantum_left` is what the call may use
    before it is demoted from `queue`. `promoted` is set by anti-starvation until the call next
    starts running: it goes first, but does not preempt anyone to get in.
    `expected_tool_seconds` is the client's hint of the tool time after this call;
    `ttft_slo` (seconds after arrival) its first-token deadline, None for none.
    `block_hashes` holds the chain hashes of the call's full blocks for the KV manager, kept
    while the call lives (`KVCacheManager.match_prefix`), so a call that waits, or is
    preempted, is not hashed again each time it is admitted.
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
    ttft_slo: float | None = None
    block_hashes: list[int] = field(default_factory=list, repr=False, compare=False)


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
    program_class: str | None = None  # a client's label of what kind of program this is
    # Tenant accounting: `service` = `floor` + its own service; `floor` is the rest of its
    # tenant's service (see ProcessTable), raised at start and at each call arrival.
    floor: float = 0.0
    idle_mark: float = 0.0  # its tenant's idle clock when its last call completed

    @property
    def own_service(self) -> float:
        """The service this program attained itself (above its tenant floor)."""
        return max(0.0, self.service - self.floor)

    @property
    def last_activity(self) -> float:
        return max(self.started, self.last_call_arrival or 0.0, self.last_call_completion or 0.0)


@dataclass
class _TenantLive:
    """One tenant's live programs (in start order) and its idle clock: the time, since this
    record was made, during which none of them had an active call."""

    programs: dict[str, ProgramRecord] = field(default_factory=dict)
    capped: int = 0  # of them, those the caps count (all but one-call programs)
    active_calls: int = 0
    idle_time: float = 0.0
    idle_since: float | None = None  # when its active calls last fell to 0 (None: busy)

    def idle_clock(self, now: float) -> float:
        if self.idle_since is None:
            return self.idle_time
        return self.idle_time + max(0.0, now - self.idle_since)


class ProcessTable:
    """Program records keyed by id. Idle records (no active call) are kept in order of last
    activity, so expiry pops only what has expired.

    Tenant accounting (anti-gaming), on when `tenant_halflife` is set, for programs with a
    tenant: a program's `service` is its `floor` plus its own service, and the floor is the
    rest of its tenant's service,

        floor = max(floor, D(now) + sum of the own service of the tenant's other live programs)

    with D the own service of the tenant's ended and expired programs, each credited when it
    ended and decaying with `tenant_halflife` since. The floor is set at start and raised
    (never lowered) at each call arrival, so a call starts from all its tenant has had, however
    it is spread over programs: a fresh program per call, programs never ended, or many
    programs used in turn or at once start no lower than one program holding the same work
    (less only the decay of ended work, which a tenant that ends its programs gets alike).
    Only own service is credited at the end, so nothing counts twice. Raising a floor shifts
    the program's service and its active calls' `start_value` alike (an ATLAS critical path
    keeps its own part). Cost: O(the tenant's live programs) per start and call arrival, at
    most `max_programs_per_tenant`. Without auth the tenant is whatever the client says: one
    that names a new tenant per program escapes all of this. Anti-gaming needs auth.

    Tenant records: one (service, as of) per tenant, in order of last credit. A record not
    credited for PRUNE_HALFLIVES half-lives (decayed below 2**-30 of its value) is dropped,
    checked at every start, credit and `expire` (the scheduler's every round): amortized
    O(1). At most `max_tenants` are kept, the least recently credited dropped first (its
    history is forgotten). Crediting nothing to a tenant without a record makes none.

    Bounds: at most `max_programs` active programs and `max_programs_per_tenant` per tenant
    (programs without a tenant count as one tenant; one-call programs count); starting one
    more raises ProgramLimitError. Live programs are indexed by tenant, so counting is O(1).

    Service half-life, on when `service_halflife` is set: while a program is idle (between
    calls) its own service (above its floor) decays with that half-life, applied when its next
    call arrives, so a long-lived session regains priority the way a tenant's record does.
    With tenant accounting, idle time is its tenant's (no call of any of its programs
    active), so spreading work over programs used in turn does not make each one idle while
    the others run.
    `observer(final_record, now)` is called for each program that ends (completed, failed or
    expired) before the `on_end` callback: the scheduler's policy learns from it.
    """

    def __init__(self, program_ttl: float, tenant_halflife: float | None = None,
                 service_halflife: float | None = None,
                 max_programs: int = _DEFAULTS.max_programs,
                 max_programs_per_tenant: int = _DEFAULTS.max_programs_per_tenant,
                 max_tenants: int = _DEFAULTS.max_tenants,
                 observer: Callable[[ProgramRecord, float], None] | None = None) -> None:
        if program_ttl <= 0:
            raise ValueError(f"program_ttl must be positive, got {program_ttl}")
        self.program_ttl = program_ttl
        self.tenant_halflife = tenant_halflife
        self.service_halflife = service_halflife
        self.max_programs = max_programs
        self.max_programs_per_tenant = max_programs_per_tenant
        self.max_tenants = max_tenants
        # tenant -> (service, as of), least recently credited first
        self._tenants: OrderedDict[str, tuple[float, float]] = OrderedDict()
        self._live: dict[str | None, _TenantLive] = {}  # tenant -> its live programs
        self._num_capped = 0  # live programs the caps count
        self._programs: dict[str, ProgramRecord] = {}
        self._idle: OrderedDict[str, None] = OrderedDict()
        self._ended: OrderedDict[str, ProgramRecord] = OrderedDict()
        self._ids = itertools.count()
        self._observer = observer
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
              ephemeral: bool = False, program_class: str | None = None) -> ProgramRecord:
        """A new active record. An `ephemeral` program (a call made without one) is ended by
        the scheduler when its call completes. `program_class` is the client's label of the
        kind of program (a policy may learn per class)."""
        if program_id is None:
            program_id = f"prog-{next(self._ids)}"
            while program_id in self._programs:
                program_id = f"prog-{next(self._ids)}"
        elif not isinstance(program_id, str) or not program_id:
            raise ValueError(f"program_id must be a non-empty string, got {program_id!r}")
        elif program_id in self._programs or program_id in self._ended:
            raise ProgramExistsError(program_id)
        if not ephemeral:  # a one-call program is bounded by the waiting queue and the seats
            self._check_limits(tenant)
        self._prune(now)
        record = ProgramRecord(program_id, tenant, now, ephemeral=ephemeral,
                               program_class=program_class)
        live = self._live.get(tenant)
        if live is None:
            live = self._live[tenant] = _TenantLive(idle_since=now)
        self._raise_floor(record, live, now)
        live.programs[program_id] = record
        live.capped += not ephemeral
        self._num_capped += not ephemeral
        self._programs[program_id] = record
        self._idle[program_id] = None
        return record

    def _check_limits(self, tenant: str | None) -> None:
        if self._num_capped >= self.max_programs:
            raise ProgramLimitError(f"max_programs: {self._num_capped} programs are active, "
                                    f"the limit is {self.max_programs}")
        live = self._live.get(tenant)
        if live is not None and live.capped >= self.max_programs_per_tenant:
            whose = "without a tenant" if tenant is None else f"of tenant {short(tenant)}"
            raise ProgramLimitError(f"max_programs_per_tenant: {live.capped} programs "
                                    f"{whose} are active, the limit is "
                                    f"{self.max_programs_per_tenant}")

    def _accounts(self, tenant: str | None) -> bool:
        return tenant is not None and bool(self.tenant_halflife)

    def _raise_floor(self, program: ProgramRecord, live: _TenantLive, now: float) -> None:
        """Raise `program`'s floor to its tenant's service besides its own (see the class)."""
        if not self._accounts(program.tenant):
            return
        others = sum(p.own_service for p in live.programs.values() if p is not program)
        floor = self.tenant_service(program.tenant, now) + others
        if floor > program.floor:
            delta = floor - program.floor
            program.service = floor + program.own_service
            program.floor = floor
            for call in program.active_calls.values():
                call.start_value += delta

    def top_by_service(self, limit: int, tenant: str | None = None) -> list[ProgramRecord]:
        """Up to `limit` active records with the most service, most first (only `tenant`'s
        when it is given)."""
        if tenant is None:
            records = self._programs.values()
        else:
            live = self._live.get(tenant)
            records = live.programs.values() if live is not None else ()
        return heapq.nlargest(limit, records, key=lambda r: r.service)

    def get(self, program_id: str) -> ProgramRecord:
        try:
            return self._programs[program_id]
        except KeyError:
            raise UnknownProgramError(program_id) from None

    def add_call(self, record: CallRecord, prompt_tokens: int) -> float | None:
        """Register a call arriving at `record.arrival`: decay the program's own service over
        its idle time (with a service half-life), raise its floor, count it active. Returns
        the tool gap the call ends (seconds since the program's last call finished with none
        active), None if it ends none."""
        program = self.get(record.program_id)
        live = self._live[program.tenant]
        now = record.arrival
        gap = None
        if program.last_call_completion is not None and not program.active_calls:
            idle = gap = max(0.0, now - program.last_call_completion)
            program.external_time += idle
            program.num_tool_gaps += 1
            if self.service_halflife:
                if self._accounts(program.tenant):
                    idle = max(0.0, live.idle_clock(now) - program.idle_mark)
                program.service = program.floor + \
                    program.own_service * 0.5 ** (idle / self.service_halflife)
        self._raise_floor(program, live, now)
        if live.idle_since is not None:
            live.idle_time = live.idle_clock(now)
            live.idle_since = None
        live.active_calls += 1
        program.active_calls[record.call_id] = record
        program.last_call_arrival = record.arrival
        program.num_calls += 1
        program.prompt_tokens += prompt_tokens
        self._idle.pop(record.program_id, None)
        return gap

    def raise_service(self, program: ProgramRecord, value: float) -> None:
        """Raise `program`'s service to at least `value`: a priority value from a trusted
        router, which folds the program's calls over every replica (server/router/). The
        raise is booked as floor, never as own service, so the program's own service stays
        what this table charged it (what its tenant is credited at the end: nothing counts
        twice), and this table's own floors and decay still apply (the higher wins). Active
        calls keep their start values (a new call starts from the raised service)."""
        if value > program.service:
            program.floor += value - program.service
            program.service = value

    def complete_call(self, record: CallRecord, now: float, generated_tokens: int) -> None:
        """Drop a finished or aborted call from its program's active calls."""
        program = self._programs.get(record.program_id)
        if program is None or program.active_calls.pop(record.call_id, None) is None:
            return
        program.last_call_completion = now
        program.generated_tokens += generated_tokens
        program.wait += record.total_wait
        live = self._live[program.tenant]
        live.active_calls -= 1
        if not live.active_calls:
            live.idle_since = now
        program.idle_mark = live.idle_clock(now)
        if not program.active_calls:
            self._idle[record.program_id] = None

    def tenant_service(self, tenant: str | None, now: float) -> float:
        """The tenant's recent service (its ended programs' own service), decayed to `now`
        (0 without tenant accounting). Its live programs' service is not included."""
        if not self._accounts(tenant) or tenant not in self._tenants:
            return 0.0
        service, as_of = self._tenants[tenant]
        return service * 0.5 ** (max(0.0, now - as_of) / self.tenant_halflife)

    def num_tenant_records(self) -> int:
        return len(self._tenants)

    def _credit_tenant(self, record: ProgramRecord, now: float) -> None:
        """Add an ending program's own service to its tenant's record (moved to the end)."""
        if self._accounts(record.tenant):
            service = self.tenant_service(record.tenant, now) + record.own_service
            self._tenants.pop(record.tenant, None)
            if service > 0:
                self._tenants[record.tenant] = (service, now)
                if len(self._tenants) > self.max_tenants:
                    self._tenants.popitem(last=False)
        self._prune(now)

    def _prune(self, now: float) -> None:
        """Drop the tenant records not credited for PRUNE_HALFLIVES half-lives."""
        if not self.tenant_halflife:
            return
        horizon = PRUNE_HALFLIVES * self.tenant_halflife
        while self._tenants:
            tenant, (_, as_of) = next(iter(self._tenants.items()))
            if now - as_of < horizon:
                return
            del self._tenants[tenant]

    def _unlist(self, record: ProgramRecord, now: float) -> None:
        """Take an ending program out of its tenant's live programs."""
        live = self._live[record.tenant]
        del live.programs[record.program_id]
        live.capped -= not record.ephemeral
        self._num_capped -= not record.ephemeral
        if record.active_calls:  # normally none: the caller finished them
            live.active_calls -= len(record.active_calls)
            if not live.active_calls:
                live.idle_since = now
        if not live.programs:
            del self._live[record.tenant]

    def end(self, program_id: str, failed: bool = False, now: float = 0.0) -> ProgramRecord:
        """Remove the program and return its final record; the caller has already finished
        its active calls. Ending a recently ended program returns the same final record."""
        record = self._programs.pop(program_id, None)
        if record is None:
            if program_id in self._ended:
                return self._ended[program_id]
            raise UnknownProgramError(program_id)
        self._idle.pop(program_id, None)
        self._unlist(record, now)
        record.state = ProgramState.FAILED if failed else ProgramState.COMPLETED
        self._credit_tenant(record, now)
        self._remember(record, now)
        return record

    def _remember(self, record: ProgramRecord, now: float) -> None:
        self._ended[record.program_id] = record
        if self._observer is not None:
            self._observer(record, now)
        if self._on_end is not None:
            self._on_end(record, now)
        if len(self._ended) > RECENTLY_ENDED:
            self._ended.popitem(last=False)

    def is_recently_ended(self, program_id: str) -> bool:
        return program_id in self._ended

    def expire(self, now: float) -> list[ProgramRecord]:
        """Remove idle programs whose last activity is `program_ttl` or more ago (and prune
        the tenant records)."""
        self._prune(now)
        expired = []
        while self._idle:
            program_id = next(iter(self._idle))
            record = self._programs[program_id]
            if record.last_activity + self.program_ttl > now:
                break
            del self._idle[program_id]
            del self._programs[program_id]
            self._unlist(record, now)
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
        indexed = {p: t for t, live in self._live.items() for p in live.programs}
        if indexed != {p: r.tenant for p, r in self._programs.items()} or \
                any(not live.programs for live in self._live.values()):
            raise RuntimeError("process table tenant index is out of date")
        for tenant, live in self._live.items():
            calls = sum(len(p.active_calls) for p in live.programs.values())
            if live.active_calls != calls or (live.idle_since is None) != bool(calls):
                raise RuntimeError(f"tenant {short(tenant)} counts {live.active_calls} active "
                                   f"calls, its programs have {calls}")
        if len(self._tenants) > self.max_tenants:
            raise RuntimeError(f"{len(self._tenants)} tenant records, more than max_tenants")
