"""The router's races, each forced deterministically with gated fake replica stubs (an await
that returns only when the test opens its gate), no sleeps:

- EndProgram while a call of the program is being started on a replica: the router ends
  the program first, so the late StartProgram is undone at once and the call gets
  NOT_FOUND; nothing lingers on any replica;
- a program that ends while a Generate sizes its prompt: NOT_FOUND, not UNKNOWN;
- tokens forwarded while an EngineStats poll is in flight still count in the load;
- an Abort while the call's program is being started on its replica: the call is never
  forwarded and ends with finish reason "abort";
- an Abort while the forwarded call is in transit (its replica does not know it yet, so its
  own Abort finds nothing): the router cancels the forwarded call, which the replica aborts
  on arrival, and the call ends with finish reason "abort";
- a replica lost after a call's final message, before the stream closed: the call ends
  complete, counted once, and the client gets no error (it would re-send the call); but a
  call its draining replica cut ("shutdown", then UNAVAILABLE) still ends UNAVAILABLE.
"""

from __future__ import annotations

import asyncio

import grpc
import pytest

from engine.errors import UnknownProgramError
from scheduler.placement.round_robin import RoundRobinPlacement
from server import agentix_pb2 as pb
from server.router.core import CallPhase, Router
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


class Forwarded:
    """A forwarded Generate as the router reads it: what the test `send`s arrives, nothing
    else; `cancel()` ends it as grpc.aio ends a call cancelled on this side (its reader
    gets CancelledError)."""

    def __init__(self) -> None:
        self.arriving: asyncio.Queue = asyncio.Queue()
        self.cancelled = False

    def send(self, response: pb.GenerateResponse) -> None:
        self.arriving.put_nowait(response)

    def cancel(self) -> bool:
        self.cancelled = True
        self.arriving.put_nowait(None)
        return True

    def fail(self, error: Exception) -> None:
        """End it with `error`, as grpc.aio ends a call its server broke off."""
        self.arriving.put_nowait(error)

    async def __aiter__(self):
        while (response := await self.arriving.get()) is not None:
            if isinstance(response, Exception):
                raise response
            yield response
        raise asyncio.CancelledError()


class FakeStub:
    """A replica's Agentix stub: records the RPCs it gets; StartProgram and EngineStats
    wait on their gate when one is set; a forwarded Generate is the test's to feed
    (`forwarded`); Abort finds no call (the replica's engine has not seen it), or raises
    `abort_error` when set."""

    def __init__(self) -> None:
        self.log: list[tuple[str, str]] = []
        self.start_gate: Gate | None = None
        self.stats_gate: Gate | None = None
        self.stats = pb.EngineStatsResponse()
        self.forwarded: list[Forwarded] = []
        self.abort_error: grpc.aio.AioRpcError | None = None

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
        self.log.append(("generate", request.call_id))
        self.forwarded.append(Forwarded())
        return self.forwarded[-1]

    async def Abort(self, request, metadata=(), timeout=None):
        self.log.append(("abort", request.call_id))
        if self.abort_error is not None:
            raise self.abort_error
        return pb.AbortResponse(aborted=False)


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


class Prompts:
    """RouterPrompts that size every prompt at once: 4 tokens."""

    async def shape(self, request, block_size):
        return PromptShape(4, ())


def generating(router: Router, request: pb.GenerateRequest
               ) -> tuple[RouterServicer, asyncio.Future]:
    """`request`'s Generate through a servicer over `router`, under way: the servicer and
    the future of the call's responses."""
    servicer = RouterServicer(router, Prompts())

    async def generate():
        return [r async for r in servicer.Generate(request, FakeContext())]

    return servicer, asyncio.ensure_future(generate())


async def abort(servicer: RouterServicer, call_id: str) -> bool:
    reply = await servicer.Abort(pb.AbortRequest(call_id=call_id), FakeContext())
    return reply.aborted


def abort_final(call_id: str) -> pb.GenerateResponse:
    return pb.GenerateResponse(call_id=call_id, final=pb.Final(
        finish_reason="abort", usage=pb.Usage(prompt_tokens=4)))


def test_an_abort_while_the_program_starts_on_the_replica_is_never_forwarded():
    async def scenario():
        router, stubs = make_router()
        router.programs.start(router.clock(), "p", "p", None)
        gate = Gate()
        for stub in stubs:
            stub.start_gate = gate
        servicer, call = generating(router, pb.GenerateRequest(
            program_id="p", call_id="c", token_ids=pb.TokenIds(ids=[1, 2, 3, 4])))
        await gate.entered.wait()  # StartProgram is on its way to replica 0
        assert router.calls["c"].phase is CallPhase.STARTING
        assert await abort(servicer, "c")
        gate.opened.set()  # replica 0 started the program
        assert await asyncio.wait_for(call, 5) == [abort_final("c")]
        assert stubs[0].log == [("start", "p")] and stubs[1].log == []  # never forwarded
        assert router.calls == {} and router.programs.routed["p"].started_on == {0}
        record = router.programs.get("p")
        assert (record.num_calls, record.active_calls, record.service) == (1, {}, 0.0)
        await router.close()

    run(scenario())


def test_an_abort_while_the_forwarded_call_is_in_transit_cancels_it():
    async def scenario():
        router, stubs = make_router()
        servicer, call = generating(router, pb.GenerateRequest(
            call_id="c", token_ids=pb.TokenIds(ids=[1, 2, 3, 4])))
        while not stubs[0].forwarded:
            await asyncio.sleep(0)
        assert router.calls["c"].phase is CallPhase.FORWARDED
        assert await abort(servicer, "c")
        assert await asyncio.wait_for(call, 5) == [abort_final("c")]
        assert stubs[0].log == [("generate", "c"), ("abort", "c")]
        assert stubs[0].forwarded[0].cancelled  # the replica aborts it on arrival
        assert router.calls == {} and router.retried == 0 and stubs[1].log == []
        await router.close()

    run(scenario())


def test_an_abort_its_replica_cannot_take_cuts_the_streaming_call():
    async def scenario():
        router, stubs = make_router()
        stubs[0].abort_error = grpc.aio.AioRpcError(
            grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata(), "gone")
        delta = pb.GenerateResponse(call_id="c", delta=pb.Delta(token_ids=[7]))
        servicer, call = generating(router, pb.GenerateRequest(
            call_id="c", token_ids=pb.TokenIds(ids=[1, 2, 3, 4])))
        while not stubs[0].forwarded:
            await asyncio.sleep(0)
        stubs[0].forwarded[0].send(delta)
        while router.calls["c"].phase is not CallPhase.STREAMING:
            await asyncio.sleep(0)
        assert await abort(servicer, "c")
        assert await asyncio.wait_for(call, 5) == [delta, abort_final("c")]
        assert stubs[0].log == [("generate", "c"), ("abort", "c")]
        assert stubs[0].forwarded[0].cancelled and router.calls == {}
        await router.close()

    run(scenario())


def test_a_replica_lost_after_the_final_message_leaves_the_call_complete_and_counted_once():
    async def scenario():
        router, stubs = make_router()
        router.programs.start(router.clock(), "p", "p", None)
        delta = pb.GenerateResponse(call_id="c", delta=pb.Delta(token_ids=[7, 8]))
        final = pb.GenerateResponse(call_id="c", final=pb.Final(
            finish_reason="length", usage=pb.Usage(prompt_tokens=4, completion_tokens=2)))
        servicer, call = generating(router, pb.GenerateRequest(
            program_id="p", call_id="c", token_ids=pb.TokenIds(ids=[1, 2, 3, 4])))
        while not stubs[0].forwarded:
            await asyncio.sleep(0)
        forwarded = stubs[0].forwarded[0]
        forwarded.send(delta)
        forwarded.send(final)
        forwarded.fail(grpc.aio.AioRpcError(  # killed before its stream closed
            grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata(), "killed"))
        assert await asyncio.wait_for(call, 5) == [delta, final]
        record = router.programs.get("p")
        assert (record.num_calls, record.generated_tokens, record.active_calls) == (1, 2, {})
        assert router.calls == {} and router.lost_mid_stream == 0 and router.retried == 0
        await router.close()

    run(scenario())


def test_a_call_cut_by_its_replicas_drain_still_ends_unavailable():
    async def scenario():
        router, stubs = make_router()
        delta = pb.GenerateResponse(call_id="c", delta=pb.Delta(token_ids=[7]))
        cut = pb.GenerateResponse(call_id="c", final=pb.Final(
            finish_reason="shutdown", usage=pb.Usage(prompt_tokens=4, completion_tokens=1)))
        servicer, call = generating(router, pb.GenerateRequest(
            call_id="c", token_ids=pb.TokenIds(ids=[1, 2, 3, 4])))
        while not stubs[0].forwarded:
            await asyncio.sleep(0)
        forwarded = stubs[0].forwarded[0]
        forwarded.send(delta)
        forwarded.send(cut)
        forwarded.fail(grpc.aio.AioRpcError(
            grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata(), "draining"))
        with pytest.raises(Aborted) as info:
            await asyncio.wait_for(call, 5)
        assert info.value.code == grpc.StatusCode.UNAVAILABLE  # the client re-sends it
        assert router.calls == {}
        await router.close()

    run(scenario())
