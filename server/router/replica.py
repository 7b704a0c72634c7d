"""Replica: the router's view of one engine replica: its address and grpc.aio channel, its
health, its last EngineStats (the placement's load), and the calls the router has in flight
on it.

Health: `watch()` asks `grpc.health.v1` Check every `poll_seconds` (0.5 s) and reads
EngineStats when SERVING. A replica is healthy from its first SERVING answer until it
answers NOT_SERVING (draining or stalled: it takes no new calls, but its calls in flight
go on) or becomes unreachable: a check or a forwarded call meets UNAVAILABLE (connection
refused or reset; a forwarded call's error makes it check at once, `suspect()`), or
MAX_TIMEOUTS checks in a row time out. It is healthy again at its next SERVING answer. On
each healthy -> not healthy transition `on_lost(index)` is called; when unreachable, every
call in flight on it is cut (`Attempt.lost` set, its gRPC call cancelled), so the router
retries or fails it at once instead of waiting for TCP to notice.

A replica found by DNS discovery (`server.router.discovery`) that leaves the name is
`retire`d: it stops being polled and is never healthy again, so it takes no new call, while
its calls in flight go on (a pod being drained still answers them); `rejoin` undoes that.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Callable, Sequence

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from scheduler.placement.base import ReplicaLoad
from server import agentix_pb2 as pb
from server import agentix_pb2_grpc
from server.router.replica_cache import ReplicaCache

log = logging.getLogger(__name__)
SERVICE = "agentix.v1.Agentix"
POLL_SECONDS = 0.5
CHECK_TIMEOUT = 2.0
MAX_TIMEOUTS = 3  # checks in a row that time out before a replica counts as unreachable
# Reconnect soon after a replica comes back (gRPC's default backoff grows to 120 s).
CHANNEL_OPTIONS = (("grpc.initial_reconnect_backoff_ms", 100),
                   ("grpc.min_reconnect_backoff_ms", 100),
                   ("grpc.max_reconnect_backoff_ms", 1000),
                   ("grpc.max_receive_message_length", 64 << 20),
                   ("grpc.max_send_message_length", 64 << 20))


@dataclass(eq=False)
class Attempt:
    """One forwarded Generate on one replica. `lost` is set when the replica was declared
    lost while the call was in flight (its gRPC call is then cancelled)."""

    replica: int
    call: grpc.aio.UnaryStreamCall
    lost: bool = False


@dataclass(eq=False)
class Replica:
    """One replica (see the module docstring). `metadata` is what the router's own requests
    (health aside: EngineStats, ModelInfo) carry: a bearer token when the replicas run with
    auth. `model_info` is the replica's ModelInfo, once read. `cache` (None: not asked) is
    its prefix cache as its KV events say, read after each EngineStats."""

    index: int
    address: str
    metadata: Sequence[tuple[str, str]] = ()
    poll_seconds: float = POLL_SECONDS
    on_lost: Callable[[int], None] | None = None
    on_back: Callable[[int], None] | None = None
    cache: ReplicaCache | None = None
    healthy: bool = False
    stats: pb.EngineStatsResponse | None = None
    model_info: pb.ModelInfoResponse | None = None
    sent_tokens: int = 0  # tokens forwarded since the last EngineStats
    placed: int = 0  # placement decisions that chose it (its metrics' counter)
    attempts: set[Attempt] = field(default_factory=set)
    retired: bool = False  # left the replica set: polled no more, never healthy
    closed: bool = False  # its channel is closed (retired, no call left in flight)
    _wake: asyncio.Event | None = None
    _timeouts: int = 0
    _watcher: asyncio.Task | None = None

    def __post_init__(self) -> None:
        self.channel = grpc.aio.insecure_channel(self.address, options=CHANNEL_OPTIONS)
        self.stub = agentix_pb2_grpc.AgentixStub(self.channel)
        self._health = health_pb2_grpc.HealthStub(self.channel)

    # ----- load -------------------------------------------------------------------------
    def load(self) -> ReplicaLoad:
        """What placement sees: the last EngineStats, plus the prompt tokens the router sent
        since (so a burst between two polls is spread), healthy only while healthy."""
        stats = self.stats
        if stats is None:
            return ReplicaLoad(self.index, healthy=self.healthy, waiting_tokens=self.sent_tokens)
        return ReplicaLoad(
            self.index, healthy=self.healthy, running_tokens=stats.running_tokens,
            waiting_tokens=stats.waiting_tokens + self.sent_tokens,
            calls_running=stats.calls_running,
            calls_waiting=stats.calls_waiting + stats.calls_swapped,
            kv_blocks_free=stats.kv_blocks_free + stats.kv_blocks_cached,
            kv_blocks_total=max(1, stats.kv_blocks_total),
            cached=self.cache.hashes if self.cache is not None else None)

    # ----- calls in flight --------------------------------------------------------------
    def forward(self, request: pb.GenerateRequest, metadata: Sequence[tuple[str, str]],
                prompt_tokens: int) -> Attempt:
        """Start `request` on this replica (the caller reads the stream, then `done()`)."""
        attempt = Attempt(self.index, self.stub.Generate(request, metadata=tuple(metadata)))
        self.attempts.add(attempt)
        self.sent_tokens += prompt_tokens
        return attempt

    def done(self, attempt: Attempt) -> None:
        self.attempts.discard(attempt)
        attempt.call.cancel()  # a no-op once the stream ended; else the replica aborts it

    # ----- membership -------------------------------------------------------------------
    def start(self) -> None:
        """Start polling (`watch`) on the running loop (once; again after `retire`)."""
        if self._watcher is None:
            self._watcher = asyncio.ensure_future(self.watch())

    def retire(self) -> None:
        """Leave the replica set: stop polling and count as not healthy from now on (its
        placement pins move: `on_lost`); calls in flight on it go on."""
        self.retired = True
        if self._watcher is not None:
            self._watcher.cancel()
            self._watcher = None
        self._set_healthy(False, reachable=True)

    def rejoin(self) -> None:
        """Back in the replica set (a retired, not yet closed replica): polled again, healthy
        from its next SERVING answer."""
        self.retired = False
        self.start()

    # ----- health -----------------------------------------------------------------------
    def suspect(self) -> None:
        """A forwarded call found the channel broken: check health now."""
        if self._wake is not None:
            self._wake.set()

    async def watch(self) -> None:
        """Poll health (and, while SERVING, EngineStats and once ModelInfo) until cancelled."""
        self._wake = asyncio.Event()
        while True:
            await self.check()
            try:
                await asyncio.wait_for(self._wake.wait(), self.poll_seconds)
            except asyncio.TimeoutError:
                pass
            self._wake.clear()

    async def check(self) -> bool:
        """One health check (and stats read); updates `healthy`, returns it."""
        try:
            reply = await self._health.Check(health_pb2.HealthCheckRequest(service=SERVICE),
                                             timeout=CHECK_TIMEOUT)
            serving = reply.status == health_pb2.HealthCheckResponse.SERVING
            if serving:
                if self.model_info is None:
                    self.model_info = await self.stub.ModelInfo(
                        pb.ModelInfoRequest(), metadata=tuple(self.metadata),
                        timeout=CHECK_TIMEOUT)
                sent_before = self.sent_tokens
                self.stats = await self.stub.EngineStats(
                    pb.EngineStatsRequest(), metadata=tuple(self.metadata),
                    timeout=CHECK_TIMEOUT)
                if self.cache is not None:
                    await self.cache.refresh(self.stub)
                # The stats count what was sent before the poll; what was sent during it
                # still counts on top of them.
                self.sent_tokens -= sent_before
            self._timeouts = 0
            self._set_healthy(serving, reachable=True)
        except grpc.aio.AioRpcError as exc:
            timed_out = exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED
            self._timeouts = self._timeouts + 1 if timed_out else 0
            if self.healthy:
                log.warning("replica %d (%s): %s %s", self.index, self.address,
                            exc.code().name, exc.details())
            if not timed_out or self._timeouts >= MAX_TIMEOUTS:
                self._set_healthy(False, reachable=exc.code() != grpc.StatusCode.UNAVAILABLE
                                  and self._timeouts < MAX_TIMEOUTS)
        return self.healthy

    def _set_healthy(self, serving: bool, reachable: bool) -> None:
        serving = serving and not self.retired
        if not reachable:
            for attempt in list(self.attempts):  # its calls in flight are gone with it
                attempt.lost = True
                attempt.call.cancel()
        if serving == self.healthy:
            return
        self.healthy = serving
        if serving:
            log.info("replica %d (%s) is serving", self.index, self.address)
            if self.on_back is not None:
                self.on_back(self.index)
            return
        log.warning("replica %d (%s) %s", self.index, self.address,
                    "not serving" if reachable else "lost")
        self.stats = None
        if self.on_lost is not None:
            self.on_lost(self.index)

    async def close(self) -> None:
        """Stop polling and close the channel (its calls in flight end with it)."""
        if self._watcher is not None:
            self._watcher.cancel()
            await asyncio.gather(self._watcher, return_exceptions=True)
            self._watcher = None
        await self.channel.close()
        self.closed = True
