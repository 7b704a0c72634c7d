"""AgentixServicer: the agentix.v1.Agentix service (grpc.aio) over an EngineLoop.

Every engine access, checks included, runs on the engine thread through the loop, so a
request error comes back as an exception and becomes a status (server.errors.status_of):
INVALID_ARGUMENT naming the field, NOT_FOUND for an unknown or ended program,
ALREADY_EXISTS for a taken id, RESOURCE_EXHAUSTED at the waiting-queue bound, UNAVAILABLE
while draining, UNAUTHENTICATED / PERMISSION_DENIED with auth on. A Generate stream whose
client goes away (cancel, deadline, disconnect) aborts its call, which frees its blocks.
"""

from __future__ import annotations

import logging
from typing import AsyncIterator, Callable, NoReturn, TypeVar

import grpc

from engine import LLMEngine
from engine.errors import UnknownProgramError
from server import agentix_pb2 as pb
from server import agentix_pb2_grpc
from server import calls, convert
from server.auth import TokenAuth
from server.call_stream import StreamDelta
from server.engine_loop import EngineLoop
from server.calls import check_owner
from server.errors import DrainingError, message_of, status_of

T = TypeVar("T")
log = logging.getLogger(__name__)
SERVICE_NAME = pb.DESCRIPTOR.services_by_name["Agentix"].full_name


class AgentixServicer(agentix_pb2_grpc.AgentixServicer):
    """Handlers run on the server's asyncio loop; `auth=None` turns authentication off."""

    def __init__(self, engine_loop: EngineLoop, auth: TokenAuth | None = None) -> None:
        self.loop = engine_loop
        self.auth = auth

    # ----- plumbing ---------------------------------------------------------------------
    async def _caller(self, context: grpc.aio.ServicerContext) -> str | None:
        """The caller's tenant with auth on (UNAUTHENTICATED without a known token)."""
        if self.auth is None:
            return None
        tenant = self.auth.tenant_of(context.invocation_metadata())
        if tenant is None:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED,
                                "authorization: missing or unknown bearer token")
        return tenant

    async def _fail(self, context: grpc.aio.ServicerContext, exc: Exception) -> NoReturn:
        code = status_of(exc)
        if code is None:
            log.error("internal error", exc_info=exc)
            await context.abort(grpc.StatusCode.INTERNAL, f"internal error: {message_of(exc)}")
        await context.abort(code, message_of(exc))

    async def _run(self, context: grpc.aio.ServicerContext, fn: Callable[[LLMEngine], T]) -> T:
        try:
            return await self.loop.run(fn)
        except Exception as exc:
            await self._fail(context, exc)

    # ----- programs ---------------------------------------------------------------------
    async def StartProgram(self, request: pb.StartProgramRequest,
                           context: grpc.aio.ServicerContext) -> pb.StartProgramResponse:
        caller = await self._caller(context)
        tenant = caller if self.auth is not None else (request.tenant or None)
        proposed = request.program_id or None

        def start(engine: LLMEngine) -> str:
            if self.loop.draining:
                raise DrainingError("the server is shutting down: no new programs")
            return engine.start_program(proposed, tenant)

        return pb.StartProgramResponse(program_id=await self._run(context, start))

    async def EndProgram(self, request: pb.EndProgramRequest,
                         context: grpc.aio.ServicerContext) -> pb.ProgramInfo:
        caller = await self._caller(context)
        program_id = request.program_id
        if not program_id:
            await self._fail(context, ValueError("program_id: must not be empty"))
        what = f"program_id {program_id!r}"

        def end(engine: LLMEngine) -> pb.ProgramInfo:
            try:
                live = engine.get_program(program_id)
            except UnknownProgramError:  # perhaps recently ended: ending again is harmless
                record = engine.end_program(program_id, request.failed)
                check_owner(record.tenant, caller, what)
            else:
                check_owner(live.tenant, caller, what)
                record = engine.end_program(program_id, request.failed)
            return convert.program_info(record)

        return await self._run(context, end)

    async def GetProgram(self, request: pb.GetProgramRequest,
                         context: grpc.aio.ServicerContext) -> pb.ProgramInfo:
        caller = await self._caller(context)
        program_id = request.program_id
        if not program_id:
            await self._fail(context, ValueError("program_id: must not be empty"))

        def get(engine: LLMEngine) -> pb.ProgramInfo:
            record = engine.get_program(program_id)
            check_owner(record.tenant, caller, f"program_id {program_id!r}")
            return convert.program_info(record)

        return await self._run(context, get)

    # ----- calls ------------------------------------------------------------------------
    async def Generate(self, request: pb.GenerateRequest,
                       context: grpc.aio.ServicerContext) -> AsyncIterator[pb.GenerateResponse]:
        caller = await self._caller(context)
        try:
            prompt = convert.prompt(request)
            params = convert.sampling_params(request.sampling)
        except ValueError as exc:
            await self._fail(context, exc)
        add = calls.adder(calls.CallRequest(
            program_id=request.program_id or None, prompt=prompt, params=params,
            caller=caller, tenant=caller, thread_id=request.thread_id or None,
            call_id=request.call_id or None,
            expected_tool_seconds=(request.expected_tool_seconds
                                   if request.HasField("expected_tool_seconds") else None)))
        try:
            stream = await self.loop.submit(add)
        except Exception as exc:
            await self._fail(context, exc)
        try:
            async for item in stream:
                if isinstance(item, StreamDelta):
                    yield convert.delta(stream.call_id, item.token_ids, item.text)
                else:
                    yield convert.final(item.completion)
        finally:
            stream.cancel()  # the client went away before the final item: abort the call

    async def Abort(self, request: pb.AbortRequest,
                    context: grpc.aio.ServicerContext) -> pb.AbortResponse:
        caller = await self._caller(context)
        call_id = request.call_id
        if not call_id:
            await self._fail(context, ValueError("call_id: must not be empty"))

        def abort(engine: LLMEngine) -> bool:
            call = engine.calls.get(call_id)
            if call is None or call.is_finished:
                return False
            check_owner(engine.get_program(call.program_id).tenant, caller,
                        f"call_id {call_id!r}")
            engine.abort_call(call_id)
            return True

        return pb.AbortResponse(aborted=await self._run(context, abort))

    async def ModelInfo(self, request: pb.ModelInfoRequest,
                        context: grpc.aio.ServicerContext) -> pb.ModelInfoResponse:
        await self._caller(context)
        return await self._run(context, convert.model_info)

    async def EngineStats(self, request: pb.EngineStatsRequest,
                          context: grpc.aio.ServicerContext) -> pb.EngineStatsResponse:
        caller = await self._caller(context)
        try:
            limit = convert.top_programs(request)
        except ValueError as exc:
            await self._fail(context, exc)

        def stats(engine: LLMEngine) -> pb.EngineStatsResponse:
            # With auth on, a tenant sees the load but only its own programs.
            return convert.engine_stats(engine.stats(), engine.programs_by_service(limit, caller))

        return await self._run(context, stats)
