"""Router: the state one router holds (replicas, program records, the placement policy, the
calls in flight) and the decisions around it: where a call goes, starting a program on a
replica before its first call there, and what a lost replica changes.

Everything here runs on the router's one asyncio loop (no locks). Metadata: a request the
router forwards carries the client's `authorization` header (the replicas authenticate it
with the same token file, or run without auth) and, when the router has one, its router
token (`x-agentix-router-token`, which lets the replica accept `program_priority`). The
router's own requests (EngineStats polls, ending expired programs) carry a token of the
token file: the tenant's own when it acts for one.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from dataclasses import dataclass
from typing import Sequence

import grpc

from scheduler.placement.base import CallOutcome, Placement, PlacementRequest, ReplicaLoad
from scheduler.process_table import ProgramRecord, UnknownProgramError
from server import agentix_pb2 as pb
from server.auth import ROUTER_TOKEN_HEADER
from server.errors import ServerError
from server.router.programs import RouterPrograms, policy_for
from server.router.replica import CHECK_TIMEOUT, Attempt, Replica
from server.router.replica_cache import ReplicaCache

log = logging.getLogger(__name__)
START_TIMEOUT = 10.0  # seconds for a replica to answer StartProgram / EndProgram
MAX_REPLICAS = 256  # addresses a router routes to at once (discovery ignores the rest)


class NoReplicaError(ServerError):
    """No healthy replica can take the call."""

    code = grpc.StatusCode.UNAVAILABLE


class CallPhase(enum.Enum):
    """Where a routed call is in its life (`RoutedCall.move` allows only the transitions in
    PHASE_MOVES)."""

    PLACING = "placing"      # choosing a replica: first, or again after a retryable failure
    STARTING = "starting"    # its program is being started on the chosen replica
    FORWARDED = "forwarded"  # forwarded; nothing relayed yet, so it may still be retried
    STREAMING = "streaming"  # part of it reached the client: never retried from here
    DONE = "done"            # its final message was relayed
    ABORTED = "aborted"      # ended here by the client's Abort, with no replica's final


PHASE_MOVES = {
    CallPhase.PLACING: {CallPhase.PLACING, CallPhase.STARTING, CallPhase.FORWARDED,
                        CallPhase.ABORTED},
    CallPhase.STARTING: {CallPhase.FORWARDED, CallPhase.PLACING, CallPhase.ABORTED},
    CallPhase.FORWARDED: {CallPhase.STREAMING, CallPhase.DONE, CallPhase.PLACING,
                          CallPhase.ABORTED},
    CallPhase.STREAMING: {CallPhase.STREAMING, CallPhase.DONE, CallPhase.ABORTED},
    CallPhase.DONE: set(),
    CallPhase.ABORTED: set(),
}
# The moves that put a call on a replica: an aborted call makes none of them.
TOWARDS_A_REPLICA = frozenset({CallPhase.PLACING, CallPhase.STARTING, CallPhase.FORWARDED})


class CallAborted(Exception):
    """The client aborted the call before it was (again) on a replica: it is now ABORTED."""


@dataclass(eq=False)
class RoutedCall:
    """A call in flight through the router: its `phase`, the replica it was last placed on,
    its current attempt (None between attempts), its final message once relayed, and
    whether the client aborted it.

    The relay moves the phase; an Abort only marks the call (`abort()`), and the relay's
    next move reads the mark, so an Abort between any two awaits takes effect."""

    call_id: str
    phase: CallPhase = CallPhase.PLACING
    replica: int | None = None
    attempt: Attempt | None = None
    final: pb.Final | None = None
    aborted: bool = False

    @property
    def streamed(self) -> bool:
        """Whether any of it reached the client (then it is not retried here)."""
        return self.phase in (CallPhase.STREAMING, CallPhase.DONE)

    def move(self, phase: CallPhase) -> None:
        """Go to `phase`; RuntimeError (a router bug) for a move PHASE_MOVES does not allow.
        An aborted call's move towards a replica (TOWARDS_A_REPLICA) goes to ABORTED
        instead and raises CallAborted: it is never (again) placed, started or forwarded."""
        if phase not in PHASE_MOVES[self.phase]:
            raise RuntimeError(f"call {self.call_id}: {self.phase.value} -> {phase.value} "
                               f"is not a call's move")
        if self.aborted and phase in TOWARDS_A_REPLICA:
            self.phase = CallPhase.ABORTED
            raise CallAborted(self.call_id)
        self.phase = phase

    def abort(self) -> bool:
        """The client's Abort: False when it has ended or was aborted already; else it is
        marked (see `move`) and, when it is on a replica (`attempt`), the caller aborts it
        there."""
        if self.aborted or self.phase in (CallPhase.DONE, CallPhase.ABORTED):
            return False
        self.aborted = True
        return True


class Router:
    """See the module docstring. `tokens` (token -> tenant) is the auth token file, None
    with auth off; `router_token` is sent to the replicas with every forwarded call.
    `discovered`: the replica set also follows `set_addresses` (DNS discovery), so it may
    start empty; `addresses` are static replicas then, which it never removes.

    A replica's index is its slot in `replicas`, which never shrinks: a retired replica's
    slot is taken by the next new address once its channel is closed."""

    def __init__(self, addresses: Sequence[str], placement: Placement,
                 programs: RouterPrograms, tokens: dict[str, str] | None = None,
                 router_token: str | None = None, poll_seconds: float = 0.5,
                 clock=time.monotonic, discovered: bool = False) -> None:
        if not addresses and not discovered:
            raise ValueError("replicas: at least one replica address is needed")
        self.placement = placement
        self.programs = programs
        self.clock = clock
        self.router_token = router_token
        self._tenant_tokens: dict[str, str] = {}
        for token, tenant in (tokens or {}).items():
            self._tenant_tokens.setdefault(tenant, token)
        self._own = (("authorization", f"Bearer {next(iter(tokens))}"),) if tokens else ()
        self._poll_seconds = poll_seconds
        self._static = tuple(addresses)
        self.replicas = [self._replica(i, address) for i, address in enumerate(addresses)]
        self.calls: dict[str, RoutedCall] = {}  # inner call id -> in flight
        # Failover counters: calls retried transparently (nothing streamed yet), and calls
        # cut mid-stream (UNAVAILABLE to the client).
        self.retried = 0
        self.lost_mid_stream = 0
        self._starting: dict[tuple[str, int], asyncio.Future] = {}
        self._policy_set = False

    # ----- metadata ---------------------------------------------------------------------
    def forwarded(self, client_metadata) -> list[tuple[str, str]]:
        """What a forwarded request carries: the client's authorization, the router token."""
        metadata = [(key, value) for key, value in client_metadata or ()
                    if key.lower() == "authorization"]
        if self.router_token is not None:
            metadata.append((ROUTER_TOKEN_HEADER, self.router_token))
        return metadata

    def acting_for(self, tenant: str | None) -> list[tuple[str, str]]:
        """Metadata for the router's own request on behalf of `tenant`."""
        token = self._tenant_tokens.get(tenant) if tenant is not None else None
        metadata = [("authorization", f"Bearer {token}")] if token else []
        if self.router_token is not None:
            metadata.append((ROUTER_TOKEN_HEADER, self.router_token))
        return metadata

    # ----- replicas ---------------------------------------------------------------------
    def _replica(self, index: int, address: str) -> Replica:
        """A replica; with a router token, one whose KV events are read (only a trusted
        router may)."""
        cache = (ReplicaCache(index, self._own + ((ROUTER_TOKEN_HEADER, self.router_token),),
                              CHECK_TIMEOUT) if self.router_token is not None else None)
        return Replica(index, address, self._own, self._poll_seconds, self._lost, self._back,
                       cache)

    def start(self) -> None:
        """Start polling every replica (on the router's loop)."""
        for replica in self.replicas:
            if not replica.retired:
                replica.start()

    async def set_addresses(self, addresses: Sequence[str]) -> None:
        """Make the replica set the static replicas (the router's own `addresses`, never
        removed) followed by the discovered `addresses` (the first MAX_REPLICAS of both, in
        order): replicas no longer named retire (no new call; calls in flight go on),
        retired ones with no call left are closed, named ones not in the set join: a
        retired replica of the same address rejoins, else a new one takes the first closed
        slot or a new index. Joining replicas take calls from their first SERVING answer."""
        wanted = list(dict.fromkeys((*self._static, *addresses)))
        if len(wanted) > MAX_REPLICAS:
            log.warning("discovery: %d replicas, routing to the first %d", len(wanted),
                        MAX_REPLICAS)
            wanted = wanted[:MAX_REPLICAS]
        for replica in self.replicas:
            if not replica.retired and replica.address not in wanted:
                log.info("replica %d (%s) left the replica set", replica.index,
                         replica.address)
                replica.retire()
        for replica in self.replicas:
            if replica.retired and not replica.closed and not replica.attempts \
                    and replica.address not in wanted:
                await replica.close()
        present = {r.address: r for r in self.replicas if not r.closed}
        for address in wanted:
            replica = present.get(address)
            if replica is not None:
                if replica.retired:
                    replica.rejoin()
                continue
            free = next((r.index for r in self.replicas if r.closed), len(self.replicas))
            replica = self._replica(free, address)
            if free == len(self.replicas):
                self.replicas.append(replica)
            else:
                self.replicas[free] = replica
            log.info("replica %d (%s) joined the replica set", free, address)
            replica.start()

    def healthy(self) -> list[Replica]:
        return [r for r in self.replicas if r.healthy]

    def model_info(self) -> pb.ModelInfoResponse | None:
        """The first healthy replica's ModelInfo (None: no replica answered yet). The first
        one read also sets the program fold to the replicas' policy."""
        for replica in self.healthy() + self.replicas:
            if replica.model_info is not None:
                if not self._policy_set:
                    self.programs.policy = policy_for(replica.model_info.policy)
                    self._policy_set = True
                return replica.model_info
        return None

    def block_size(self) -> int:
        info = self.model_info()
        return info.block_size if info is not None else 0

    def loads(self, excluded: set[int] = frozenset()) -> list[ReplicaLoad]:
        loads = []
        for replica in self.replicas:
            load = replica.load()
            if replica.index in excluded and load.healthy:
                load = ReplicaLoad(**{**load.__dict__, "healthy": False})
            loads.append(load)
        return loads

    def place(self, request: PlacementRequest, excluded: set[int]) -> Replica:
        """The replica `request` goes to (NoReplicaError when none is healthy)."""
        loads = self.loads(excluded)
        if not any(load.healthy for load in loads):
            raise NoReplicaError("no healthy replica can take the call")
        replica = self.replicas[self.placement.place(request, loads)]
        replica.placed += 1
        return replica

    def observe(self, request: PlacementRequest, replica: int, usage: pb.Usage) -> None:
        batch = self.replicas[replica].load().calls_running
        self.placement.observe(request, CallOutcome(replica, usage.prompt_tokens,
                                                    usage.cached_tokens, usage.queue_seconds,
                                                    batch))

    def _lost(self, index: int) -> None:
        """A replica stopped serving: its pins move, and its programs must be started
        again there if it comes back (it may have lost them)."""
        self.placement.replica_lost(index)
        self.programs.replica_lost(index)

    def _back(self, index: int) -> None:
        log.info("replica %d is used again", index)

    # ----- programs on replicas ---------------------------------------------------------
    async def ensure_started(self, program_id: str, replica: Replica,
                             metadata: Sequence[tuple[str, str]]) -> None:
        """Start the program on `replica` unless it already was (one StartProgram however
        many calls wait on it; ALREADY_EXISTS counts as started). Raises the replica's
        AioRpcError otherwise, UnknownProgramError if the program has ended (here)."""
        routed = self.programs.routed.get(program_id)
        if routed is None:
            raise UnknownProgramError(program_id)
        if replica.index in routed.started_on:
            return
        key = (program_id, replica.index)
        future = self._starting.get(key)
        if future is None:
            future = self._starting[key] = asyncio.ensure_future(
                self._start_on(program_id, replica, metadata))
            future.add_done_callback(lambda _: self._starting.pop(key, None))
        await asyncio.shield(future)

    async def _start_on(self, program_id: str, replica: Replica,
                        metadata: Sequence[tuple[str, str]]) -> None:
        """StartProgram on `replica`; if the program ended here meanwhile, end it there
        again at once (its EndProgram did not know of this replica) and raise
        UnknownProgramError: no call of an ended program is forwarded."""
        routed = self.programs.routed.get(program_id)
        if routed is None:
            raise UnknownProgramError(program_id)
        request = pb.StartProgramRequest(
            program_id=routed.outer_id, tenant=routed.tenant or "",
            program_class=self.programs.get(program_id).program_class or "")
        try:
            await replica.stub.StartProgram(request, metadata=tuple(metadata),
                                            timeout=START_TIMEOUT)
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.ALREADY_EXISTS:
                raise
        if self.programs.routed.get(program_id) is not routed:  # ended while we waited
            await self._end_everywhere(routed.outer_id, [replica.index], False, metadata)
            raise UnknownProgramError(program_id)
        routed.started_on.add(replica.index)

    async def end_program(self, program_id: str, failed: bool,
                          metadata: Sequence[tuple[str, str]]) -> ProgramRecord:
        """End the program: here first, before any await, so no call of it is placed or
        started anywhere from then on (UnknownProgramError for an unknown id; a recently
        ended one's final record again), then on every replica it was started on (their
        calls of it are aborted there), adding the swap time they report. A replica that
        cannot be reached is skipped (it lost the program, or its TTL will end it)."""
        routed = self.programs.routed.get(program_id)
        active = program_id in self.programs.table
        record = self.programs.end(self.clock(), program_id, failed)
        if active:
            self.placement.program_ended(program_id)
        if routed is not None:
            record.swap_time += await self._end_everywhere(
                routed.outer_id, sorted(routed.started_on), failed, metadata)
        return record

    async def _end_everywhere(self, outer_id: str, indices: list[int], failed: bool,
                              metadata: Sequence[tuple[str, str]]) -> float:
        request = pb.EndProgramRequest(program_id=outer_id, failed=failed)

        async def end(replica: Replica) -> float:
            try:
                info = await replica.stub.EndProgram(request, metadata=tuple(metadata),
                                                     timeout=START_TIMEOUT)
                return info.swap_time
            except grpc.aio.AioRpcError as exc:
                log.info("ending %s on replica %d: %s", outer_id, replica.index,
                         exc.code().name)
                return 0.0

        swaps = await asyncio.gather(*(end(self.replicas[i]) for i in indices))
        return float(sum(swaps))

    async def expire(self) -> None:
        """End programs past their TTL here and on their replicas."""
        for record, routed in self.programs.expire(self.clock()):
            self.placement.program_ended(record.program_id)
            await self._end_everywhere(routed.outer_id, sorted(routed.started_on), False,
                                       self.acting_for(routed.tenant))

    # ----- lifecycle --------------------------------------------------------------------
    async def close(self) -> None:
        for replica in self.replicas:
            if not replica.closed:
                await replica.close()
