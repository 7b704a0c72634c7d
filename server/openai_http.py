"""The OpenAI-compatible HTTP door (FastAPI), over the same EngineLoop as gRPC.

    POST /v1/chat/completions   messages through the model's chat template; SSE when stream
    POST /v1/completions        a string or token ids, or a batch (n choices per prompt)
    POST /v1/responses          the Responses API as a form of chat (server/openai_responses.py)
    POST /tokenize, /detokenize vLLM's token endpoints (server/openai_tokens.py)
    GET  /v1/models, /health, /metrics
    GET  /v1/programs/{id}      the program's process-table record
    POST /v1/programs/{id}:end  end it (its calls are aborted)

Program identity: the `X-Program-Id` header (alias `X-Session-Id`) or `program_id` in the
body; an unknown id starts the program, for the bearer token's tenant (TTL expiry ends it).
No program named: the call gets a one-call program, or with several calls (`n > 1`, batched
prompts) a program of its own whose threads ATLAS schedules together, ended when the
request ends. A program a request
starts (an unknown id, or the n choices' own) gets the class the `X-Program-Class` header or
`program_class` in the body gives (the header wins; checked like an id, else 400 naming
`program_class`); a program that exists keeps its class, a one-call program has none.
Tools: a chat request's `tools` reach the chat template (unless `tool_choice` is "none"), as
do an assistant message's `tool_calls` and a tool message's `tool_call_id` and `name`. With
`tool_choice` "auto" (or unset) the server must parse tool calls (`tool_call_parser`, vLLM's
`--enable-auto-tool-choice --tool-call-parser NAME`; else 400 naming `tool_choice`): each
choice's output becomes `message.tool_calls` (finish_reason "tool_calls") and content, or
streams as tool-call deltas; `parallel_tool_calls: false` keeps the first call. A forced
`tool_choice` ("required", a named function) and `response_format` are constrained decoding
(`server.openai_structured`, `server.tool_parsers.forced`).
`ttft_slo_seconds` in the body is the first-token deadline of each call the request makes
(seconds after it arrives, 0 < s <= 86400, else 400 naming it; unset: the engine's). A
client that disconnects (streamed or not) aborts its calls, which frees their blocks. Errors
use OpenAI's body, `{"error": {"message", "type", "param", "code"}}`, with 400, 401, 404,
409, 413, 429 and 503.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable

import grpc
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from engine import ChatPrompt, CompletionOutput
from engine.errors import UnknownProgramError
from scheduler.ids import check_id
from server import convert
from server.auth import AuthError, TokenAuth
from server.call_stream import CallStream, StreamDelta
from engine.llm_engine import check_ttft_slo
from server.calls import CallRequest, adder
from server.engine_loop import EngineLoop
from server.errors import DrainingError, ServerError, message_of, status_of
from server.metrics import CONTENT_TYPE, ServerMetrics
from server.openai_protocol import (ChatCompletionRequest, CompletionRequest, chat_choice,
                                    chunk_delta, envelope, first_call_only, for_choice,
                                    fragment_chunk, now_seconds, text_choice,
                                    tool_calls_finish, usage)
from engine.logprobs import TokenLogprob
from server.namespace import Namespace, new_id
from server.openai_logprobs import chat_logprobs, completion_logprobs, token_ids_of
from server.openai_responses import (ResponseEvents, ResponsesRequest, final_status,
                                     output_items, response_object, response_usage)
from server.prompts import PromptTokenizer
from server.tool_parsers import ParsedOutput, ToolParser, make_tool_parser
from server.openai_tokens import TokenEndpoints
from server.tool_parsers.forced import ForcedCallParser
from server.wire import SHUTDOWN, message_to_dict

log = logging.getLogger(__name__)
ParserFactory = Callable[[], ToolParser]  # a fresh tool parser for one output
Prompt = str | list[int] | ChatPrompt  # one call's prompt, before tokenizing
PROGRAM_HEADERS = ("x-program-id", "x-session-id")
PROGRAM_CLASS_HEADER = "x-program-class"
DISCONNECT_POLL_SECONDS = 0.25  # how often a non-streamed request checks for its client
CLIENT_CLOSED_REQUEST = 499     # the status logged for a request whose client went away
BODY_OVERHEAD_BYTES = 64 << 10  # a body's room beyond its prompt
HTTP_STATUS = {grpc.StatusCode.INVALID_ARGUMENT: 400, grpc.StatusCode.UNAUTHENTICATED: 401,
               grpc.StatusCode.PERMISSION_DENIED: 403, grpc.StatusCode.NOT_FOUND: 404,
               grpc.StatusCode.ALREADY_EXISTS: 409, grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
               grpc.StatusCode.UNAVAILABLE: 503}
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error",
               403: "permission_error", 404: "not_found_error", 409: "conflict_error",
               413: "invalid_request_error", 429: "rate_limit_error", 500: "internal_error",
               503: "service_unavailable"}
FIELD_NAME = re.compile(r"^([A-Za-z_][\w.\[\]]*)(?=:| must| is| has| exceed| leaves| \d)")


class HttpError(Exception):
    """A request error with its HTTP status and the parameter it names (if any)."""

    def __init__(self, status: int, message: str, param: str | None = None,
                 code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code


def error_response(status: int, message: str, param: str | None = None,
                   code: str | None = None) -> JSONResponse:
    return JSONResponse(status_code=status, content={"error": {
        "message": message, "type": ERROR_TYPES.get(status, "error"), "param": param,
        "code": code}})


def http_error_of(exc: Exception) -> HttpError:
    """The HTTP form of an engine or server request error (500 for anything else)."""
    if isinstance(exc, HttpError):
        return exc
    code = status_of(exc)
    if code is None:
        log.error("internal error", exc_info=exc)
        return HttpError(500, f"internal error: {message_of(exc)}")
    message = message_of(exc)
    match = FIELD_NAME.match(message) if code == grpc.StatusCode.INVALID_ARGUMENT else None
    return HttpError(HTTP_STATUS.get(code, 500), message, match.group(1) if match else None)


class BodyLimit:
    """ASGI middleware: an HTTP request body may be at most `max_bytes`, declared or not.
    A body without a declared length is read (up to the limit) before the app sees it."""

    def __init__(self, app, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope.get("headers") or ()).get(b"content-length")
        if declared is not None:
            if declared.isdigit() and int(declared) > self.max_bytes:
                return await self._refuse(scope, receive, send)
            return await self.app(scope, receive, send)
        messages, size = [], 0
        while True:
            message = await receive()
            messages.append(message)
            size += len(message.get("body", b""))
            if size > self.max_bytes:
                return await self._refuse(scope, receive, send)
            if message["type"] != "http.request" or not message.get("more_body"):
                break

        async def replay():
            return messages.pop(0) if messages else await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, scope, receive, send) -> None:
        """413, closing the connection: kept alive, the server would read and discard the
        rest of the body (up to the size declared) before the next request."""
        message = f"body: larger than the server's limit of {self.max_bytes} bytes"
        response = error_response(413, message)
        response.headers["Connection"] = "close"
        await response(scope, receive, send)


@dataclass(frozen=True)
class StartedCalls:
    """A request's submitted calls: one stream per choice; `own_program` when the request
    started a program of its own (`program_id`, ended with the request); `named` the
    program the client named (None: none); `parser` makes the tool parser of the outputs
    (None: plain text)."""

    ns: Namespace
    streams: list[CallStream]
    own_program: bool
    program_id: str | None
    named: str | None
    parser: ParserFactory | None


class OpenAIDoor:
    """The handlers; `auth=None` turns authentication off."""

    def __init__(self, engine_loop: EngineLoop, prompts: PromptTokenizer | None,
                 auth: TokenAuth | None, metrics: ServerMetrics, model_name: str,
                 max_model_len: int, tool_call_parser: str | None = None) -> None:
        self.tool_call_parser = tool_call_parser
        self.loop = engine_loop
        self.prompts = prompts
        self.auth = auth
        self.metrics = metrics
        self.model_name = model_name
        self.max_model_len = max_model_len

    # ----- plumbing ---------------------------------------------------------------------
    def namespace(self, request: Request) -> Namespace:
        """The caller's namespace; 401 with auth on and no usable bearer token."""
        if self.auth is None:
            return Namespace(None)
        try:
            return Namespace(self.auth.authenticate(request.headers.items()))
        except AuthError as exc:
            raise HttpError(401, str(exc), code="invalid_api_key") from None

    def inner(self, ns: Namespace, field: str, client_id: str) -> str:
        try:
            return ns.inner(field, client_id)
        except ValueError as exc:
            raise http_error_of(exc) from None

    def check_model(self, model: str | None) -> None:
        if model is not None and model != self.model_name:
            raise HttpError(404, f"model: {model[:64]!r} is not served here (this server "
                                 f"serves {self.model_name!r})", "model", "model_not_found")

    async def run(self, fn, ns: Namespace):
        try:
            return await self.loop.run(fn)
        except Exception as exc:
            raise http_error_of(ns.outer_error(exc)) from None

    # ----- info -------------------------------------------------------------------------
    async def models(self, request: Request) -> dict[str, Any]:
        self.namespace(request)
        return {"object": "list", "data": [{
            "id": self.model_name, "object": "model", "created": 0, "owned_by": "agentix",
            "max_model_len": self.max_model_len}]}

    async def health(self) -> Response:
        if self.loop.draining:
            return error_response(503, "the server is shutting down")
        if self.loop.stalled():
            return error_response(503, "the engine has made no progress for "
                                       f"{self.loop.stall_seconds:g} s while it has work")
        return JSONResponse({"status": "ok"})

    async def render_metrics(self) -> Response:
        stats = await self.run(lambda engine: engine.stats(), Namespace(None))
        return Response(self.metrics.render(stats), media_type=CONTENT_TYPE)

    # ----- programs ---------------------------------------------------------------------
    async def get_program(self, request: Request, program_id: str) -> dict[str, Any]:
        ns = self.namespace(request)
        inner = self.inner(ns, "program_id", program_id)
        return message_to_dict(await self.run(
            lambda engine: convert.program_info(engine.get_program(inner), ns.outer), ns))

    async def end_program(self, request: Request, program_id: str) -> dict[str, Any]:
        ns = self.namespace(request)
        inner = self.inner(ns, "program_id", program_id)
        # Ending a recently ended program again is harmless: its final record.
        return message_to_dict(await self.run(
            lambda engine: convert.program_info(engine.end_program(inner), ns.outer), ns))

    # ----- calls ------------------------------------------------------------------------
    async def chat(self, request: Request, body: ChatCompletionRequest) -> Response:
        return await self._generate(request, body, "chat.completion", lambda: [body.chat()])

    def _tool_parser(self, body) -> ParserFactory | None:
        """What makes the tool parser a chat request's outputs go through (None: plain
        text): a forced choice's own (`ForcedCallParser`), or the server's for "auto"; 400
        when it asks for "auto" tool choice and the server parses no tool calls."""
        if not isinstance(body, ChatCompletionRequest):
            return None
        try:
            forced, function = body.forced_tool()
        except ValueError as exc:
            raise http_error_of(exc) from None
        if forced:
            return lambda: ForcedCallParser(function)
        if not body.parses_tool_calls():
            return None
        if self.tool_call_parser is None:
            raise HttpError(400, 'tool_choice: "auto" tool choice needs a server started with '
                                 '--enable-auto-tool-choice --tool-call-parser NAME (or send '
                                 'tool_choice "none")', "tool_choice")
        name = self.tool_call_parser
        return lambda: make_tool_parser(name)

    async def responses(self, request: Request, body: ResponsesRequest) -> Response:
        """`/v1/responses`: the request as chat, its output as a `response` (or its
        streamed events)."""
        unsupported = body.unsupported()
        if unsupported is not None:
            raise HttpError(400, f"{unsupported}: not supported by this server (it stores no "
                                 f"responses)", unsupported)
        try:
            chat = body.to_chat()
        except ValueError as exc:
            raise http_error_of(exc) from None
        started = await self.start_calls(request, chat, lambda: [chat.chat()])
        response_id = f"resp_{started.ns.outer(started.streams[0].call_id)}"
        created = now_seconds()
        if body.stream:
            events = ResponseEvents(body, response_id, self.model_name, created)
            return StreamingResponse(self._response_sse(started, events, chat),
                                     media_type="text/event-stream")
        completions = await self.finish_calls(request, started)
        if completions is None:  # the client went away: its calls are aborted
            return Response(status_code=CLIENT_CLOSED_REQUEST)
        completion = completions[0]
        parsed = _parsed(started.parser, completion.text, chat.parallel_tool_calls)
        return JSONResponse(response_object(
            body, response_id, self.model_name, created, final_status(completion),
            output_items(response_id, completion, parsed), response_usage(completion)))

    async def _response_sse(self, started: StartedCalls, events: ResponseEvents,
                            chat: ChatCompletionRequest) -> AsyncIterator[str]:
        """A response's event stream (a client that goes away aborts the call)."""
        parser = (_StreamedCalls(started.parser, chat.parallel_tool_calls)
                  if started.parser else None)
        try:
            for event in events.start():
                yield event
            async for item in started.streams[0]:
                if isinstance(item, StreamDelta):
                    fragments = parser.feed(item.text, False) if parser else [
                        {"content": item.text}]
                    for fragment in fragments:
                        for event in events.fragment(fragment):
                            yield event
                    continue
                for fragment in parser.finish() if parser else ():
                    for event in events.fragment(fragment):
                        yield event
                reason = item.completion.finish_reason
                if reason in ("error", SHUTDOWN):
                    for event in events.fail("the engine failed while running this call"
                                             if reason == "error" else
                                             "the server is shutting down: retry it"):
                        yield event
                else:
                    for event in events.finish(item.completion):
                        yield event
        finally:
            await self.end_calls(started)

    async def completions(self, request: Request, body: CompletionRequest) -> Response:
        return await self._generate(request, body, "text_completion", body.prompt_values)

    async def _generate(self, request: Request, body, kind: str,
                        prompts_of: Callable[[], list[Prompt]]) -> Response:
        started = await self.start_calls(request, body, prompts_of)
        ns, streams = started.ns, started.streams
        own_program, program_id, named = started.own_program, started.program_id, started.named
        parser = started.parser
        response_id = (f"{'chatcmpl' if kind == 'chat.completion' else 'cmpl'}-"
                       f"{ns.outer(streams[0].call_id)}")
        if body.stream:
            chunk_kind = "chat.completion.chunk" if kind == "chat.completion" else kind
            return StreamingResponse(
                self._sse(streams, chunk_kind, response_id, body, own_program, program_id,
                          parser), media_type="text/event-stream")
        completions = await self.finish_calls(request, started)
        if completions is None:  # the client went away: its calls are aborted
            return Response(status_code=CLIENT_CLOSED_REQUEST)
        logprobs = [await self._logprobs(kind, c.logprobs) for c in completions]
        if kind == "chat.completion":
            choices = [chat_choice(i, c, body.return_token_ids,
                                   _parsed(parser, c.text, body.parallel_tool_calls),
                                   logprobs[i])
                       for i, c in enumerate(completions)]
        else:
            choices = [text_choice(i, c, body.return_token_ids, logprobs[i])
                       for i, c in enumerate(completions)]
        return JSONResponse(envelope(
            kind, response_id, self.model_name, now_seconds(), choices,
            usage=usage(completions), program_id=ns.outer(program_id) if named else ""))

    async def _logprobs(self, kind: str, entries: list[TokenLogprob] | None,
                        offset: int = 0) -> dict[str, Any] | None:
        """`entries` in the OpenAI shape of `kind` (chat or completions; None: not asked)."""
        if entries is None:
            return None
        texts = await self.prompts.token_texts(token_ids_of(entries))
        if kind.startswith("chat.completion"):
            return chat_logprobs(entries, texts)
        return completion_logprobs(entries, texts, offset)

    async def start_calls(self, request: Request, body,
                          prompts_of: Callable[[], list[Prompt]]) -> StartedCalls:
        """Authenticate, validate and submit a request's calls, `n` per prompt in order
        (HttpError naming what is wrong; nothing is left submitted then)."""
        ns = self.namespace(request)
        self.check_model(body.model)
        unsupported = body.unsupported()
        if unsupported is not None:
            raise HttpError(400, f"{unsupported}: not supported by this server", unsupported)
        parser = self._tool_parser(body)
        named = next((request.headers[h] for h in PROGRAM_HEADERS if h in request.headers),
                     body.program_id)
        program_class = request.headers.get(PROGRAM_CLASS_HEADER, body.program_class)
        try:
            prompts = [await self.prompts.token_ids(p) for p in prompts_of()]
            params = body.sampling_params(body.requested_max_tokens() or self.max_model_len)
            if params.structured is not None and self.prompts is not None:
                await self.prompts.compile_grammar(params.structured, body.grammar_field())
            for field, value in (("thread_id", body.thread_id),
                                 ("program_class", program_class)):
                if value is not None:
                    check_id(field, value)
            check_ttft_slo(body.ttft_slo_seconds)
            program_id = None if named is None else ns.inner("program_id", named)
        except ValueError as exc:
            raise http_error_of(exc) from None
        calls = [(token_ids, i * body.n + j) for i, token_ids in enumerate(prompts)
                 for j in range(body.n)]
        own_program = named is None and len(calls) > 1
        if own_program:
            program_id = ns.inner("program_id", new_id("prog"))
            await self.run(lambda engine: engine.start_program(
                program_id, ns.tenant, program_class=program_class), ns)
        streams: list[CallStream] = []
        try:
            for token_ids, index in calls:
                thread = (body.thread_id if len(calls) == 1 else
                          f"{body.thread_id or 'choice'}-{index}")
                streams.append(await self._submit(ns, CallRequest(
                    program_id=program_id, call_id=ns.inner("call_id", new_id("call")),
                    prompt=token_ids, params=for_choice(params, index), tenant=ns.tenant,
                    thread_id=thread, expected_tool_seconds=body.expected_tool_seconds,
                    start_unknown=True, program_class=program_class,
                    ttft_slo_seconds=body.ttft_slo_seconds)))
        except BaseException:
            for stream in streams:
                stream.cancel()
            await self._end_own(own_program, program_id)
            raise
        return StartedCalls(ns, streams, own_program, program_id, named, parser)

    async def finish_calls(self, request: Request, started: StartedCalls
                           ) -> list[CompletionOutput] | None:
        """The started calls' completions (None if the client went away: they are aborted);
        the calls end here either way. HttpError 500 or 503 for a call the engine failed or
        the shutdown cut."""
        try:
            completions = await _until_done_or_gone(request, started.streams)
        finally:
            await self.end_calls(started)
        if completions is None:
            return None
        if any(c.finish_reason == "error" for c in completions):
            raise HttpError(500, "internal error: the engine failed while running this call")
        if any(c.finish_reason == SHUTDOWN for c in completions):
            raise HttpError(503, "the server is shutting down: this call was cut; retry it")
        return completions

    async def end_calls(self, started: StartedCalls) -> None:
        """Abort what is left of the calls, end the request's own program."""
        for stream in started.streams:
            stream.cancel()
        await self._end_own(started.own_program, started.program_id)

    async def _submit(self, ns: Namespace, call: CallRequest) -> CallStream:
        try:
            return await self.loop.submit(adder(call))
        except Exception as exc:
            raise http_error_of(ns.outer_error(exc)) from None

    async def _end_own(self, own_program: bool, program_id: str | None) -> None:
        if own_program and program_id is not None:
            try:
                await self.loop.run(lambda engine: engine.end_program(program_id))
            except (UnknownProgramError, DrainingError):
                pass

    async def _sse(self, streams: list[CallStream], kind: str, response_id: str, body,
                   own_program: bool, program_id: str | None,
                   parser: ParserFactory | None = None) -> AsyncIterator[str]:
        """The SSE body: a role chunk per choice (chat), the choices' deltas interleaved as
        they come (with a `parser`, as the tool parser's fragments: content, then each
        tool call's opening and arguments), a finish chunk per choice, the usage chunk if
        asked for, `[DONE]`. A client that goes away aborts the calls (the generator is
        closed)."""
        created = now_seconds()

        def event(choices: list[dict[str, Any]], **extra: Any) -> str:
            payload = envelope(kind, response_id, self.model_name, created, choices, **extra)
            return f"data: {json.dumps(payload)}\n\n"

        ids = body.return_token_ids
        try:
            if kind == "chat.completion.chunk":
                for index in range(len(streams)):
                    yield event([chunk_delta(kind, index, "", [] if ids else None, None,
                                             role=True)])
            completions: list[CompletionOutput | None] = [None] * len(streams)
            calls = [_StreamedCalls(parser, body.parallel_tool_calls) if parser
                     else None for _ in streams]
            offsets = [0] * len(streams)  # characters streamed per choice (text_offset)
            async with contextlib.aclosing(_merge(streams)) as merged:
                async for index, item in merged:
                    parsed = calls[index]
                    if isinstance(item, StreamDelta):
                        token_ids = item.token_ids if ids else None
                        logprobs = await self._logprobs(kind, item.logprobs, offsets[index])
                        if logprobs is not None and "text_offset" in logprobs:
                            offsets[index] += sum(len(t) for t in logprobs["tokens"])
                        if parsed is None:
                            yield event([chunk_delta(kind, index, item.text, token_ids, None,
                                                     logprobs=logprobs)])
                        else:
                            for fragment in parsed.feed(item.text, token_ids is not None
                                                        or logprobs is not None):
                                yield event([fragment_chunk(index, fragment, token_ids,
                                                            logprobs)])
                                token_ids = [] if ids else None  # sent with the first
                                logprobs = None
                        continue
                    completions[index] = item.completion
                    reason = item.completion.finish_reason
                    if parsed is not None:
                        for fragment in parsed.finish():
                            yield event([fragment_chunk(index, fragment, [] if ids else None)])
                        reason = tool_calls_finish(reason) if parsed.made_calls else reason
                    yield event([chunk_delta(kind, index, "", [] if ids else None, reason)])
            if body.include_usage():
                yield event([], usage=usage(completions))
            yield "data: [DONE]\n\n"
        finally:
            for stream in streams:
                stream.cancel()
            await self._end_own(own_program, program_id)


def _parsed(parser: ParserFactory | None, text: str, parallel: bool) -> ParsedOutput | None:
    """A whole chat output split into content and tool calls (None without a parser)."""
    if parser is None:
        return None
    parsed = parser().parse(text)
    return parsed if parallel else first_call_only(parsed)


class _StreamedCalls:
    """One streamed choice's tool parser: the fragments to send for each text delta, with
    `parallel_tool_calls: false` keeping only the first call's."""

    def __init__(self, parser: ParserFactory, parallel: bool) -> None:
        self.parser = parser()
        self.parallel = parallel
        self.made_calls = False

    def feed(self, text: str, send_empty: bool) -> list[dict[str, Any]]:
        """The fragments for `text`; one empty fragment when none but the chunk must go
        (`send_empty`: it carries the delta's token ids)."""
        return self._kept(self.parser.feed(text)) or ([{}] if send_empty else [])

    def finish(self) -> list[dict[str, Any]]:
        return self._kept(self.parser.finish())

    def _kept(self, fragments: list[dict[str, Any]]) -> list[dict[str, Any]]:
        kept = [f for f in fragments if self.parallel or "tool_calls" not in f
                or f["tool_calls"][0]["index"] == 0]
        self.made_calls = self.made_calls or any("tool_calls" in f for f in kept)
        return kept


async def _until_done_or_gone(request: Request, streams: list[CallStream]
                              ) -> list[CompletionOutput] | None:
    """The streams' completions, or None as soon as the client has disconnected."""
    gathered = asyncio.ensure_future(asyncio.gather(*(_collect(s) for s in streams)))
    while True:
        done, _ = await asyncio.wait({gathered}, timeout=DISCONNECT_POLL_SECONDS)
        if done:
            return gathered.result()
        if await request.is_disconnected():
            gathered.cancel()
            return None


async def _collect(stream: CallStream) -> CompletionOutput:
    async for item in stream:
        if not isinstance(item, StreamDelta):
            return item.completion
    raise RuntimeError("stream ended without a final item")


async def _merge(streams: list[CallStream]) -> AsyncIterator[tuple[int, Any]]:
    """Items of several streams as they arrive, tagged with the stream's index."""
    if len(streams) == 1:
        async for item in streams[0]:
            yield 0, item
        return
    queue: asyncio.Queue = asyncio.Queue()

    async def pump(index: int, stream: CallStream) -> None:
        async for item in stream:
            await queue.put((index, item))
        await queue.put((index, None))

    tasks = [asyncio.ensure_future(pump(i, s)) for i, s in enumerate(streams)]
    try:
        open_streams = len(streams)
        while open_streams:
            index, item = await queue.get()
            if item is None:
                open_streams -= 1
            else:
                yield index, item
    finally:
        for task in tasks:
            task.cancel()


def _install_errors(app: FastAPI) -> None:
    @app.exception_handler(HttpError)
    async def on_http_error(_: Request, exc: HttpError) -> JSONResponse:
        return error_response(exc.status, exc.message, exc.param, exc.code)

    @app.exception_handler(RequestValidationError)
    async def on_validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        if first.get("type") == "json_invalid":
            return error_response(400, "body: not valid JSON "
                                       f"({first.get('ctx', {}).get('error', 'decode error')})")
        where = [str(part) for part in first.get("loc", ()) if part != "body"]
        param = ".".join(where) or None
        return error_response(400, f"{param or 'body'}: {first.get('msg', 'invalid request')}",
                              param)

    @app.exception_handler(StarletteHTTPException)
    async def on_starlette_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        # FastAPI's own refusals (a body it cannot parse: invalid UTF-8, JSON nested past
        # the parser's depth) in OpenAI's body.
        message = "body: not valid JSON" if exc.status_code == 400 else str(exc.detail)
        return error_response(exc.status_code, message)

    @app.exception_handler(ServerError)
    async def on_server_error(_: Request, exc: ServerError) -> JSONResponse:
        error = http_error_of(exc)
        return error_response(error.status, error.message, error.param, error.code)


def build_app(engine_loop: EngineLoop, prompts: PromptTokenizer, auth: TokenAuth | None,
              metrics: ServerMetrics, model_name: str, max_model_len: int,
              tool_call_parser: str | None = None) -> FastAPI:
    """The OpenAI-compatible app (see the module docstring). A request body may be up to
    four times the prompt limit (JSON escapes) plus room for the other fields.
    `tool_call_parser` (a `server.tool_parsers` name; None: off) turns on "auto" tool
    choice."""
    door = OpenAIDoor(engine_loop, prompts, auth, metrics, model_name, max_model_len,
                      tool_call_parser)
    app = FastAPI(title="Agentix", docs_url=None, redoc_url=None, openapi_url=None)
    _install_errors(app)
    app.add_middleware(BodyLimit, max_bytes=4 * prompts.max_prompt_bytes + BODY_OVERHEAD_BYTES)
    app.post("/v1/chat/completions")(door.chat)
    app.post("/v1/completions")(door.completions)
    app.post("/v1/responses")(door.responses)
    app.get("/v1/models")(door.models)
    tokens = TokenEndpoints(prompts, max_model_len, door.namespace, door.check_model,
                            http_error_of)
    app.post("/tokenize")(tokens.tokenize)
    app.post("/detokenize")(tokens.detokenize)
    app.get("/v1/programs/{program_id}")(door.get_program)
    app.post("/v1/programs/{program_id}:end")(door.end_program)
    app.get("/health")(door.health)
    app.get("/metrics")(door.render_metrics)
    return app


def build_metrics_app(engine_loop: EngineLoop, metrics: ServerMetrics) -> FastAPI:
    """/metrics and /health alone (the metrics port of a gRPC-only server)."""
    door = OpenAIDoor(engine_loop, None, None, metrics, "", 0)
    app = FastAPI(title="Agentix metrics", docs_url=None, redoc_url=None, openapi_url=None)
    app.get("/metrics")(door.render_metrics)
    app.get("/health")(door.health)
    return app
