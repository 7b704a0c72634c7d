"""The router's races, each forced deterministically with gated fake replica stubs (an await
that returns only when the test opens its gate), no sleeps:

- EndProgram while a call of the program is being started on a replica: the router ends
  the program first, so the late StartProgram is undone at once and the call gets
  NOT_FOUND; nothing lingers on any replica;
- a program that ends while a Generate sizes its prompt: NOT_FOUND, not UNKNOWN;
- tokens forwarded while an EngineStats poll is in flight still count in the load.
"""

from __future__ import annotations

import asyncio

import grpc
import pytest

from engine.errors import UnknownProgramError
from scheduler.placement.round_robin import RoundRobinPlacement
from server import agentix_pb2 as pb
from server.router.core import Router
from server.router.programs import RouterPrograms
from server.router.prompts import PromptShape
from server.router.service import RouterServicer


class Gate:
    """An await the test releases: `entered` is set when something waits on it."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.opened = asyncio.Event()

    async def wait(self) -> None:
        self.entered.set()
        await self.opened.wait()


class FakeStub:
    """A replica's Agentix stub: records the program RPCs it gets; StartProgram and
    EngineStats wait on their gate when one is set."""

    def __init__(self) -> None:
        self.log: list[tuple[str, str]] = []
        self.start_gate: Gate | None = None
        self.stats_gate: Gate | None = None
        self.stats = pb.EngineStatsResponse()

    async def StartProgram(self, request, metadata=(), timeout=None):
        self.log.append(("start", request.program_id))
        if self.start_gate is not None:
            await self.start_gate.wait()
        return pb.StartProgramResponse(program_id=request.program_id)

    async def EndProgram(self, request, metadata=(), timeout=None):
        self.log.append(("end", request.program_id))
        return pb.ProgramInfo(program_id=request.program_id)

    async def EngineStats(self, request, metadata=(), timeout=None):
        if self.stats_gate is not None:
            await self.stats_gate.wait()
        return self.stats

    def Generate(self, request, metadata=()):
        raise AssertionError("no call may be forwarded in these tests")


class FakeHealth:
    async def Check(self, request, timeout=None):
        from grpc_health.v1 import health_pb2
        return health_pb2.HealthCheckResponse(status=health_pb2.HealthCheckResponse.SERVING)


class Aborted(Exception):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(code, details)
        self.code, self.details = code, details


class FakeContext:
    def invocation_metadata(self):
        return ()

    async def abort(self, code, details):
        raise Aborted(code, details)


def make_router() -> tuple[Router, list[FakeStub]]:
    router = Router(["127.0.0.1:9", "127.0.0.1:10"], RoundRobinPlacement(), RouterPrograms())
    stubs = []
    for replica in router.replicas:
        replica.stub, replica._health = FakeStub(), FakeHealth()
        replica.model_info = pb.ModelInfoResponse(policy="atlas", block_size=8)
        replica.healthy = True
        stubs.append(replica.stub)
    return router, stubs


def run(coro):
    return asyncio.run(coro)


def test_ending_a_program_while_a_call_starts_it_on_a_replica_leaves_nothing_there():
    async def scenario():
        router, (stub, _) = make_router()
        router.programs.start(router.clock(), "p", "p", None)
        stub.start_gate = gate = Gate()
        starting = asyncio.ensure_future(router.ensure_started("p", router.replicas[0], ()))
        await gate.entered.wait()  # StartProgram is on its way to replica 0
        record = await router.end_program("p", False, ())  # the router knows of no replica
        assert record.program_id == "p" and "p" not in router.programs.table
        assert stub.log == [("start", "p")]
        gate.opened.set()  # replica 0 started it after all...
        with pytest.raises(UnknownProgramError):
            await starting  # ...so the call is not forwarded
        assert stub.log == [("start", "p"), ("end", "p")]  # and it was ended there at once
        with pytest.raises(UnknownProgramError):  # a later call of it is refused outright
            await router.ensure_started("p", router.replicas[1], ())
        await router.close()

    run(scenario())


def test_a_program_started_on_replicas_is_ended_on_each_of_them():
    async def scenario():
        router, stubs = make_router()
        router.programs.start(router.clock(), "p", "outer-p", None)
        for replica in router.replicas:
            await router.ensure_started("p", replica, ())
        await router.end_program("p", False, ())
        assert [stub.log for stub in stubs] == [[("start", "outer-p"), ("end", "outer-p")]] * 2
        await router.close()

    run(scenario())


class GatedPrompts:
    """RouterPrompts whose sizing waits on a gate."""

    def __init__(self) -> None:
        self.gate = Gate()

    async def shape(self, request, block_size):
        await self.gate.wait()
        return PromptShape(4, ())


def test_a_program_that_ends_while_its_call_is_sized_is_not_found():
    async def scenario():
        router, _ = make_router()
        prompts = GatedPrompts()
        servicer = RouterServicer(router, prompts)
        router.programs.start(router.clock(), "p", "p", None)
        request = pb.GenerateRequest(program_id="p", token_ids=pb.TokenIds(ids=[1, 2, 3, 4]))

        async def generate():
            return [r async for r in servicer.Generate(request, FakeContext())]

        call = asyncio.ensure_future(generate())
        await prompts.gate.entered.wait()
        await router.end_program("p", False, ())
        prompts.gate.opened.set()
        with pytest.raises(Aborted) as info:
            await call
        assert info.value.code == grpc.StatusCode.NOT_FOUND and "p" in info.value.details
        assert router.calls == {}
        await router.close()

    run(scenario())


def test_tokens_forwarded_during_a_stats_poll_still_count():
    async def scenario():
        router, (stub, _) = make_router()
        replica = router.replicas[0]
        replica.sent_tokens = 100  # forwarded before the poll: the stats will include them
        stub.stats_gate = gate = Gate()
        stub.stats = pb.EngineStatsResponse(waiting_tokens=100)
        poll = asyncio.ensure_future(replica.check())
        await gate.entered.wait()
        replica.sent_tokens += 30  # a call forwarded while the poll is in flight
        gate.opened.set()
        assert await poll
        assert replica.sent_tokens == 30
        assert replica.load().waiting_tokens == 130
        await router.close()

    run(scenario())
