"""AgentixServicer: the agentix.v1.Agentix service (grpc.aio) over an EngineLoop.

Prompts are sized and tokenized off the engine thread (server/prompts.py); every other
engine access, checks included, runs on the engine thread through the loop, so a request
error comes back as an exception and becomes a status (server.errors.status_of):
INVALID_ARGUMENT naming the field, NOT_FOUND for an unknown or ended program (or another
tenant's: with auth on, ids live in the caller's namespace, server/namespace.py),
ALREADY_EXISTS for a taken id, RESOURCE_EXHAUSTED at a bound, UNAVAILABLE while draining
(a call cut by the drain ends with finish reason "shutdown", then UNAVAILABLE: retry it)
and once the engine broke (a tensor-parallel worker died: a call in flight ends with
UNAVAILABLE naming it, and so is every later call refused; health is NOT_SERVING),
UNAUTHENTICATED with auth on, PERMISSION_DENIED for a `program_priority` not sent by the
trusted router (server.auth.RouterTrust; without a router token no one may set it). A
Generate stream whose client goes away (cancel, deadline, disconnect) aborts its call, which
frees its blocks.
"""

from __future__ import annotations

from typing import AsyncIterator, Callable, NoReturn, TypeVar

import grpc

from engine import LLMEngine, SamplingParams
from scheduler.deadlines import check_ttft_slo
from scheduler.executor_errors import EngineBrokenError
from scheduler.ids import check_id
from server import agentix_pb2 as pb
from server import calls, convert
from server.auth import RouterTrust, TokenAuth
from server.call_stream import StreamDelta
from server.chat_output import OutputParsers, reasoning_parser_for
from server.engine_loop import EngineLoop
from server.errors import UnreadStreamError, abort_for
from server.namespace import Namespace, caller_namespace, new_id
from server.prompts import PromptTokenizer
from server.request_checks import (check_program_class, check_thread, checked_priority,
                                   top_programs)
from server.tool_parsers import make_tool_parser
from server.tool_parsers.forced import ForcedCallParser
from server.wire import SHUTDOWN, optional, program_info

T = TypeVar("T")


class AgentixServicer:
    """Handlers run on the server's asyncio loop; `auth=None` turns authentication off;
    `router` (None: no router is trusted) says which requests may carry a priority value;
    `tool_call_parser` (a `server.tool_parsers` name; None: off) parses chat outputs into
    the final message's tool calls when a request offers tools with tool choice auto;
    `reasoning_parser` (a `server.reasoning_parsers` name; None: off) splits a chat output's
    reasoning off into the final message's `reasoning` (the deltas stay the raw text)."""

    def __init__(self, engine_loop: EngineLoop, prompts: PromptTokenizer,
                 auth: TokenAuth | None = None, router: RouterTrust | None = None,
                 tool_call_parser: str | None = None, reasoning_parser: str | None = None
                 ) -> None:
        self.loop = engine_loop
        self.prompts = prompts
        self.auth = auth
        self.router = router
        self.tool_call_parser = tool_call_parser
        self.reasoning_parser = reasoning_parser

    # ----- plumbing ---------------------------------------------------------------------
    async def _namespace(self, context: grpc.aio.ServicerContext) -> Namespace:
        return await caller_namespace(self.auth, context)

    async def _fail(self, context: grpc.aio.ServicerContext, exc: Exception) -> NoReturn:
        await abort_for(context, exc)

    async def _run(self, context: grpc.aio.ServicerContext, ns: Namespace,
                   fn: Callable[[LLMEngine], T]) -> T:
        try:
            return await self.loop.run(fn)
        except Exception as exc:
            await self._fail(context, ns.outer_error(exc))

    async def _inner(self, context: grpc.aio.ServicerContext, ns: Namespace, field: str,
                     client_id: str) -> str:
        try:
            return ns.inner(field, client_id)
        except ValueError as exc:
            await self._fail(context, exc)

    # ----- programs ---------------------------------------------------------------------
    async def StartProgram(self, request: pb.StartProgramRequest,
                           context: grpc.aio.ServicerContext) -> pb.StartProgramResponse:
        ns = await self._namespace(context)
        tenant = ns.tenant if self.auth is not None else (request.tenant or None)
        try:
            if tenant is not None and self.auth is None:
                check_id("tenant", tenant)
            program_class = check_program_class(request.program_class)
        except ValueError as exc:
            await self._fail(context, exc)
        program_id = await self._inner(context, ns, "program_id",
                                       request.program_id or new_id("prog"))

        def start(engine: LLMEngine) -> str:
            self.loop.refuse_new_work()
            return engine.start_program(program_id, tenant, program_class=program_class)

        started = await self._run(context, ns, start)
        return pb.StartProgramResponse(program_id=ns.outer(started))

    async def EndProgram(self, request: pb.EndProgramRequest,
                         context: grpc.aio.ServicerContext) -> pb.ProgramInfo:
        ns = await self._namespace(context)
        program_id = await self._inner(context, ns, "program_id", request.program_id)

        def end(engine: LLMEngine) -> pb.ProgramInfo:
            # Ending a recently ended program again is harmless: its final record.
            return program_info(engine.end_program(program_id, request.failed), ns.outer)

        return await self._run(context, ns, end)

    async def GetProgram(self, request: pb.GetProgramRequest,
                         context: grpc.aio.ServicerContext) -> pb.ProgramInfo:
        ns = await self._namespace(context)
        program_id = await self._inner(context, ns, "program_id", request.program_id)
        return await self._run(context, ns, lambda engine: program_info(
            engine.get_program(program_id), ns.outer))

    # ----- calls ------------------------------------------------------------------------
    async def Generate(self, request: pb.GenerateRequest,
                       context: grpc.aio.ServicerContext) -> AsyncIterator[pb.GenerateResponse]:
        ns = await self._namespace(context)
        priority = await self._priority(request, context)
        parses = convert.parses_tool_calls(request)
        if parses and self.tool_call_parser is None:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                'messages.tool_choice: "auto" tool choice needs a server started '
                                'with --enable-auto-tool-choice --tool-call-parser NAME (or '
                                'send tool_choice "none")')
        try:
            forced, function = convert.forced_tool(request)
            params = convert.call_params(request, forced, function)
            if params.structured is not None:
                await self.prompts.compile_grammar(
                    params.structured, "messages.tool_choice" if forced else "json_schema")
            prompt_ids = await self.prompts.token_ids(convert.prompt(request))
            output = await self._output_parsers(request, forced, function, params, prompt_ids)
            call = calls.CallRequest(
                program_id=(ns.inner("program_id", request.program_id)
                            if request.program_id else None),
                call_id=ns.inner("call_id", request.call_id or new_id("call")),
                prompt=prompt_ids,
                params=params, tenant=ns.tenant,
                thread_id=(check_thread(request.thread_id) if request.thread_id else None),
                expected_tool_seconds=optional(request, "expected_tool_seconds"),
                program_service=priority,
                ttft_slo_seconds=check_ttft_slo(
                    optional(request, "ttft_slo_seconds")))
            stream = await self.loop.submit(calls.adder(call))
        except Exception as exc:
            await self._fail(context, ns.outer_error(exc))
        call_id = ns.outer(stream.call_id)
        try:
            async for item in stream:
                if isinstance(item, StreamDelta):
                    yield convert.delta(call_id, item.token_ids, item.text, item.logprobs,
                                        item.prompt_logprobs)
                    continue
                yield convert.final(item.completion, call_id,
                                    output.parse(item.completion.text) if output else None)
                if item.completion.finish_reason == SHUTDOWN:
                    await context.abort(grpc.StatusCode.UNAVAILABLE,
                                        "the server is shutting down: this call was cut; retry it")
        except (UnreadStreamError, EngineBrokenError) as exc:
            # The client stopped reading (server.call_stream), or the engine broke under
            # the call (UNAVAILABLE: retry elsewhere).
            await abort_for(context, exc)
        finally:
            stream.cancel()  # the client went away before the final item: abort the call

    async def _output_parsers(self, request: pb.GenerateRequest, forced: bool,
                              function: str | None, params: SamplingParams,
                              prompt_ids: list[int]) -> OutputParsers | None:
        """What a chat output goes through (None: plain text): a forced choice's parser,
        or the server's for tool choice auto; after the reasoning split when the server has
        a reasoning parser and no grammar constrains the output."""
        name = self.tool_call_parser
        tools = ((lambda: ForcedCallParser(function)) if forced else
                 (lambda: make_tool_parser(name)) if convert.parses_tool_calls(request)
                 else None)
        reasoning = None
        if self.reasoning_parser is not None and request.WhichOneof("prompt") == "messages" \
                and params.structured is None:
            reasoning = await reasoning_parser_for(self.reasoning_parser, prompt_ids,
                                                   self.prompts,
                                                   tools().call_marker if tools else None)
        return OutputParsers(reasoning, tools) if reasoning or tools else None

    async def _priority(self, request: pb.GenerateRequest,
                        context: grpc.aio.ServicerContext) -> float | None:
        return await checked_priority(request, context, self.router)

    async def Abort(self, request: pb.AbortRequest,
                    context: grpc.aio.ServicerContext) -> pb.AbortResponse:
        ns = await self._namespace(context)
        call_id = await self._inner(context, ns, "call_id", request.call_id)

        def abort(engine: LLMEngine) -> bool:
            call = engine.calls.get(call_id)
            if call is None or call.is_finished:
                return False
            engine.abort_call(call_id)
            return True

        return pb.AbortResponse(aborted=await self._run(context, ns, abort))

    async def ModelInfo(self, request: pb.ModelInfoRequest,
                        context: grpc.aio.ServicerContext) -> pb.ModelInfoResponse:
        ns = await self._namespace(context)
        return await self._run(context, ns, convert.model_info)

    async def EngineStats(self, request: pb.EngineStatsRequest,
                          context: grpc.aio.ServicerContext) -> pb.EngineStatsResponse:
        ns = await self._namespace(context)
        try:
            limit = top_programs(request)
        except ValueError as exc:
            await self._fail(context, exc)

        def stats(engine: LLMEngine) -> pb.EngineStatsResponse:
            # With auth on, a tenant sees the load but only its own programs.
            return convert.engine_stats(engine.stats(),
                                        engine.programs_by_service(limit, ns.tenant), ns.outer)

        return await self._run(context, ns, stats)

    async def CacheEvents(self, request: pb.CacheEventsRequest,
                          context: grpc.aio.ServicerContext) -> pb.CacheEventsResponse:
        """The cache's KV events, for the trusted router only (block hashes would tell
        anyone else which prompts are cached)."""
        ns = await self._namespace(context)
        if self.router is None or not self.router.trusted(context.invocation_metadata()):
            await context.abort(grpc.StatusCode.PERMISSION_DENIED,
                                "CacheEvents: only a trusted router may read them")
        digest = await self._run(context, ns, lambda engine: engine.cache_digest(
            request.epoch, request.since))
        return pb.CacheEventsResponse(epoch=digest.epoch, next=digest.next,
                                      reset=digest.reset, stored=digest.stored,
                                      removed=digest.removed)
