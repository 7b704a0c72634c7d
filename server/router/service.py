"""RouterServicer: agentix.v1.Agentix in front of N replicas (every RPC, same contract).

StartProgram, GetProgram and EndProgram are answered from the router's own records
(server/router/programs.py): a program is started on a replica only when a call of it is
placed there, and ended on every replica it was started on. `ProgramInfo.engine` is the
replica (index in `--replica` order) of the program's latest call; `swap_time` is summed
from the replicas when the program ends. Generate places and relays (generate.py), with the
client's fields as sent: `ttft_slo_seconds` (checked here first) counts from the call's
arrival on the replica that runs it, so a transparent retry starts it afresh. Abort takes
effect whenever it arrives before the call's final message: a call on no replica yet is
never forwarded, one forwarded is aborted on its replica (or cut, while in transit), and
the call ends with finish reason "abort". ModelInfo is a replica's. EngineStats sums the
healthy replicas' figures (queue_depths elementwise; kv and host totals too, so a router
of N replicas shows N pools), except `programs_active`, the router's own count (a program
lives on every replica it used), and lists the top programs of the router's records.

Auth works as on a single server: with a token file the router authenticates each request
(UNAUTHENTICATED), keeps ids in tenant namespaces (server/namespace.py), and forwards the
client's authorization header to the replicas. `program_priority` is refused
(PERMISSION_DENIED) unless the request carries the router's own router token (a router in
front of routers).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import AsyncIterator, Iterable, NoReturn

import grpc

from scheduler.deadlines import check_ttft_slo
from scheduler.ids import DuplicateCallError, check_id
from scheduler.placement.base import PlacementRequest
from scheduler.process_table import UnknownProgramError
from server import agentix_pb2 as pb
from server.auth import RouterTrust, TokenAuth
from server.errors import DrainingError, RelayedError, abort_for
from server.namespace import Namespace, caller_namespace, new_id
from server.request_checks import (check_program_class, check_thread, checked_priority,
                                   top_programs)
from server.router.core import CallPhase, NoReplicaError, RoutedCall, Router
from server.router.generate import LostMidStream, relay
from server.router.prompts import RouterPrompts
from server.wire import optional, program_info

log = logging.getLogger(__name__)
REPLICA_TIMEOUT = 10.0  # unary calls forwarded to a replica
_SCALARS = tuple(f.name for f in pb.EngineStatsResponse.DESCRIPTOR.fields
                 if f.message_type is None and not f.is_repeated)


class RouterServicer:
    """Handlers on the router's asyncio loop; `auth=None`: no authentication; `trust`: the
    router token that may set `program_priority` on the router itself (None: nobody)."""

    def __init__(self, router: Router, prompts: RouterPrompts, auth: TokenAuth | None = None,
                 trust: RouterTrust | None = None) -> None:
        self.router = router
        self.prompts = prompts
        self.auth = auth
        self.trust = trust
        self.draining = False

    # ----- plumbing ---------------------------------------------------------------------
    async def _namespace(self, context: grpc.aio.ServicerContext) -> Namespace:
        return await caller_namespace(self.auth, context)

    async def _fail(self, context: grpc.aio.ServicerContext, exc: Exception) -> NoReturn:
        if isinstance(exc, grpc.aio.AioRpcError):  # a replica's answer, relayed as it is
            await context.abort(exc.code(), exc.details() or "")
        await abort_for(context, exc)

    def _refuse_when_draining(self) -> None:
        if self.draining:
            raise DrainingError("the router is shutting down: no new programs or calls")

    # ----- programs ---------------------------------------------------------------------
    async def StartProgram(self, request: pb.StartProgramRequest,
                           context: grpc.aio.ServicerContext) -> pb.StartProgramResponse:
        ns = await self._namespace(context)
        try:
            tenant = ns.tenant if self.auth is not None else (request.tenant or None)
            if tenant is not None and self.auth is None:
                check_id("tenant", tenant)
            outer = request.program_id or new_id("prog")
            self.admit_program(ns, outer, tenant, check_program_class(request.program_class))
        except Exception as exc:
            await self._fail(context, ns.outer_error(exc))
        return pb.StartProgramResponse(program_id=outer)

    def admit_program(self, ns: Namespace, program_id: str, tenant: str | None,
                      program_class: str | None) -> None:
        """Start the caller's program `program_id` (as the client knows it) in the router's
        records (DrainingError, or the table's refusal: a taken id, a cap)."""
        self._refuse_when_draining()
        self.router.programs.start(self.router.clock(), ns.inner("program_id", program_id),
                                   program_id, tenant, program_class)

    async def EndProgram(self, request: pb.EndProgramRequest,
                         context: grpc.aio.ServicerContext) -> pb.ProgramInfo:
        ns = await self._namespace(context)
        router = self.router
        try:
            inner = ns.inner("program_id", request.program_id)
            record = await router.end_program(inner, request.failed,
                                              router.forwarded(context.invocation_metadata()))
            return program_info(record, ns.outer)
        except Exception as exc:
            await self._fail(context, ns.outer_error(exc))

    async def GetProgram(self, request: pb.GetProgramRequest,
                         context: grpc.aio.ServicerContext) -> pb.ProgramInfo:
        ns = await self._namespace(context)
        try:
            inner = ns.inner("program_id", request.program_id)
            return program_info(self.router.programs.get(inner), ns.outer)
        except Exception as exc:
            await self._fail(context, ns.outer_error(exc))

    # ----- calls ------------------------------------------------------------------------
    async def Generate(self, request: pb.GenerateRequest,
                       context: grpc.aio.ServicerContext) -> AsyncIterator[pb.GenerateResponse]:
        ns = await self._namespace(context)
        priority = await checked_priority(request, context, self.trust)
        try:
            responses = await self.route(ns, request, context.invocation_metadata(), priority)
        except Exception as exc:
            await self._fail(context, exc)
        # aclosing: leaving early (the client went away) closes the relay at once, which
        # cancels the forwarded call, so the replica aborts it and frees its blocks.
        async with contextlib.aclosing(responses):
            try:
                async for response in responses:
                    yield response
            except Exception as exc:
                await self._fail(context, exc)

    async def route(self, ns: Namespace, request: pb.GenerateRequest,
                    metadata: Iterable[tuple[str, str]], priority: float | None
                    ) -> AsyncIterator[pb.GenerateResponse]:
        """Admit a call (`priority`: a trusted router's value, None: none), or raise its
        request error (ids as `ns` knows them) holding nothing; then its responses as its
        replica sends them (generate.py). Iterate them to the end or close them: either
        releases what the call holds. While they stream they may raise NoReplicaError,
        UnknownProgramError (its program ended while it was placed) or RelayedError (the
        replica's error, or UNAVAILABLE when the replica was lost mid-stream)."""
        responses = self._routed(ns, request, list(metadata), priority)
        try:
            await anext(responses)  # admitted: it waits inside its cleanup's try
        except Exception as exc:
            raise ns.outer_error(exc) from None
        return responses

    async def _routed(self, ns: Namespace, request: pb.GenerateRequest,
                      metadata: list[tuple[str, str]], priority: float | None
                      ) -> AsyncIterator[pb.GenerateResponse | None]:
        """`route`'s generator: None once admitted, then the call's responses."""
        router = self.router
        self._refuse_when_draining()
        call_id = request.call_id or new_id("call")
        inner_call = ns.inner("call_id", call_id)
        if request.thread_id:
            check_thread(request.thread_id)
        check_ttft_slo(optional(request, "ttft_slo_seconds"))  # forwarded as is
        program_id = (ns.inner("program_id", request.program_id)
                      if request.program_id else None)
        if program_id is not None:
            router.programs.get(program_id)  # NOT_FOUND before anything is done
        if router.model_info() is None:
            raise NoReplicaError("no replica has answered yet")
        shape = await self.prompts.shape(request, router.block_size())
        if inner_call in router.calls:
            raise DuplicateCallError(call_id)
        forward = pb.GenerateRequest()
        forward.CopyFrom(request)
        forward.call_id = call_id
        forward.ClearField("program_priority")
        record = None
        if program_id is not None:
            # The program may have ended or expired while the prompt was sized.
            record, value = router.programs.begin_call(
                router.clock(), program_id, inner_call, request.thread_id or None,
                shape.num_tokens)
            priority = value if priority is None else max(value, priority)
        if priority is not None and router.router_token is not None:
            # Without a router token the replicas would refuse it: they then schedule the
            # program by the service it had on each of them alone.
            forward.program_priority = priority
        routed = router.calls[inner_call] = RoutedCall(inner_call)
        placement = PlacementRequest(program_id or inner_call, shape.num_tokens,
                                     shape.block_hashes, router.block_size() or 16)
        lost = False
        try:
            yield None
            async with contextlib.aclosing(relay(router, forward, router.forwarded(metadata),
                                                 shape, placement, routed,
                                                 program_id)) as responses:
                async for response in responses:
                    if record is not None and response.WhichOneof("kind") == "final":
                        usage = response.final.usage
                        router.programs.finish_call(router.clock(), record,
                                                    usage.service_seconds, usage.queue_seconds,
                                                    usage.completion_tokens)
                        record = None  # folded before the client sees the final message
                    yield response
            if routed.phase is CallPhase.ABORTED:
                yield pb.GenerateResponse(call_id=call_id, final=pb.Final(
                    finish_reason="abort", usage=pb.Usage(prompt_tokens=shape.num_tokens)))
        except LostMidStream as exc:
            lost = True
            router.lost_mid_stream += 1
            replica = exc.args[0]
            raise RelayedError(grpc.StatusCode.UNAVAILABLE,
                               f"replica {replica.index} ({replica.address}) was lost "
                               f"mid-stream: the call was cut; retry it (same call_id)"
                               ) from None
        except grpc.aio.AioRpcError as exc:  # the replica's answer, relayed as it is
            raise RelayedError(exc.code(), exc.details() or "") from None
        except UnknownProgramError as exc:  # it ended while the call was being placed
            raise ns.outer_error(exc) from None
        finally:
            router.calls.pop(inner_call, None)
            if record is not None:
                router.programs.drop_call(router.clock(), record, shape.num_tokens,
                                          counted=not lost)
            if program_id is None:
                router.placement.program_ended(inner_call)

    async def Abort(self, request: pb.AbortRequest,
                    context: grpc.aio.ServicerContext) -> pb.AbortResponse:
        ns = await self._namespace(context)
        try:
            inner = ns.inner("call_id", request.call_id)
        except ValueError as exc:
            await self._fail(context, exc)
        routed = self.router.calls.get(inner)
        if routed is None or not routed.abort():
            return pb.AbortResponse(aborted=False)
        if routed.attempt is None:  # on no replica: its next move ends it (RoutedCall.move)
            return pb.AbortResponse(aborted=True)
        return pb.AbortResponse(aborted=await self._abort_forwarded(
            routed, request, self.router.forwarded(context.invocation_metadata())))

    async def _abort_forwarded(self, routed: RoutedCall, request: pb.AbortRequest,
                               metadata: list[tuple[str, str]]) -> bool:
        """Abort `routed` (marked aborted, on a replica): there, so its final message
        says "abort"; or, when its replica does not know it while nothing of it came back
        (in transit) or cannot be asked, by cancelling the forwarded call (the replica
        aborts it if it arrives; the relay ends it ABORTED). False when it finished there
        (its final message is on its way)."""
        attempt = routed.attempt
        try:
            reply = await self.router.replicas[attempt.replica].stub.Abort(
                request, metadata=tuple(metadata), timeout=REPLICA_TIMEOUT)
            if reply.aborted:
                return True
            cut = routed.phase is CallPhase.FORWARDED
        except grpc.aio.AioRpcError as exc:
            log.info("call %s: its replica did not take the Abort (%s): cut here",
                     routed.call_id, exc.code().name)
            cut = routed.phase in (CallPhase.FORWARDED, CallPhase.STREAMING)
        if cut:
            attempt.call.cancel()
        return cut or routed.phase is CallPhase.ABORTED

    # ----- the engines ------------------------------------------------------------------
    async def ModelInfo(self, request: pb.ModelInfoRequest,
                        context: grpc.aio.ServicerContext) -> pb.ModelInfoResponse:
        await self._namespace(context)
        info = self.router.model_info()
        if info is None:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "no replica has answered yet")
        return info

    async def EngineStats(self, request: pb.EngineStatsRequest,
                          context: grpc.aio.ServicerContext) -> pb.EngineStatsResponse:
        ns = await self._namespace(context)
        try:
            limit = top_programs(request)
        except ValueError as exc:
            await self._fail(context, exc)
        replies = await asyncio.gather(*(
            replica.stub.EngineStats(pb.EngineStatsRequest(), metadata=tuple(replica.metadata),
                                     timeout=REPLICA_TIMEOUT)
            for replica in self.router.healthy()), return_exceptions=True)
        total = pb.EngineStatsResponse()
        depths: list[int] = []
        for reply in replies:
            if isinstance(reply, BaseException):
                continue
            for name in _SCALARS:
                setattr(total, name, getattr(total, name) + getattr(reply, name))
            for level, depth in enumerate(reply.queue_depths):
                if level < len(depths):
                    depths[level] += depth
                else:
                    depths.append(depth)
        total.queue_depths.extend(depths)
        total.programs_active = len(self.router.programs.table)  # not once per replica
        total.top_programs.extend(program_info(r, ns.outer)
                                  for r in self.router.programs.top(limit, ns.tenant))
        return total


    async def CacheEvents(self, request: pb.CacheEventsRequest,
                          context: grpc.aio.ServicerContext) -> pb.CacheEventsResponse:
        await self._namespace(context)
        await context.abort(grpc.StatusCode.UNIMPLEMENTED,
                            "CacheEvents: a router has no cache of its own; ask its replicas")
