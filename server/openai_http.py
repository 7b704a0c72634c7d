"""The OpenAI-compatible HTTP door (FastAPI), over one engine (the EngineLoop gRPC uses too)
or a router's replicas: the same code on a `server.door_backend.DoorBackend`.

    POST /v1/chat/completions   messages through the model's chat template; SSE when stream
    POST /v1/completions        a string or token ids, or a batch (n choices per prompt)
    POST /v1/responses          the Responses API as a form of chat (server/openai_responses.py)
    GET, DELETE /v1/responses/{id}  a stored response (server/response_store.py)
    POST /tokenize, /detokenize vLLM's token endpoints (server/openai_tokens.py)
    GET  /v1/models, /health, /metrics (an engine's, or the router's own)
    GET  /v1/programs/{id}      the program's process-table record
    POST /v1/programs/{id}:end  end it (its calls are aborted)

Program identity: the `X-Program-Id` header (alias `X-Session-Id`) or `program_id` in the
body; an unknown id starts the program, for the bearer token's tenant (TTL expiry ends it).
No program named: the call gets a one-call program, or with several calls (`n > 1`, batched
prompts) a program of its own whose threads ATLAS schedules together, ended when the
request ends; a chain of stored Responses is one program, started by its first
continuation (`OpenAIDoor._start_response`). With `--infer-programs` (`inference`), a chat
or Responses request that names no program (and continues no stored response) and whose
messages extend an earlier such request's (same tenant, within the TTL) joins that request's
program, if it is still alive; else it starts one of its own, for the tenant, ended by TTL
(`n > 1` keeps the request's own program then; past a program cap, a one-call program); the
response's `program_id` names it (server/inferred_programs.py,
scheduler/program_inference.py). A program a request starts (an unknown id, or the n
choices' own) gets the class the `X-Program-Class` header or `program_class` in the body
gives (the header wins; checked like an id, else 400 naming `program_class`); a program that
exists keeps its class, a one-call program has none.
Tools: a chat request's `tools` reach the chat template (unless `tool_choice` is "none"), as
do an assistant message's `tool_calls` and a tool message's `tool_call_id` and `name`. With
`tool_choice` "auto" (or unset) the server must parse tool calls (`tool_call_parser`, vLLM's
`--enable-auto-tool-choice --tool-call-parser NAME`; else 400 naming `tool_choice`): each
choice's output becomes `message.tool_calls` (finish_reason "tool_calls") and content, or
streams as tool-call deltas (a call opens once its name is known, its arguments stream as
written); a call the token limit cut has its arguments so far (finish_reason "length");
`parallel_tool_calls: false` keeps the first call. A forced
`tool_choice` ("required", a named function) and `response_format` are constrained decoding
(`server.openai_structured`, `server.tool_parsers.forced`).
Reasoning: with `reasoning_parser` (vLLM's `--reasoning-parser NAME`) a chat output's
reasoning is split off first, as `message.reasoning_content` (streamed: `reasoning_content`
deltas before the content and tool-call deltas; Responses: a reasoning item), and tool calls
are read from the content only (`server.chat_output`); an output a grammar constrains is not
split. `chat_template_kwargs` (chat and Responses; vLLM's) are extra variables of the chat
template (`engine.chat_prompt`, bounded, else 400 naming it), e.g. Qwen3's
`{"enable_thinking": false}`; a prompt that ends the reasoning makes the output all content.
`ttft_slo_seconds` in the body is the first-token deadline of each call the request makes
(seconds after it arrives, 0 < s <= 86400, else 400 naming it; unset: the engine's). A
client that disconnects (streamed or not) aborts its calls, which frees their blocks. Errors
use OpenAI's body, `{"error": {"message", "type", "param", "code"}}`, with 400, 401, 404,
409, 413, 429 and 503.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import time
from dataclasses import dataclass, replace
from typing import Any, AsyncIterator, Awaitable, Callable, TypeVar

from fastapi import Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from engine import ChatPrompt, CompletionOutput, SamplingParams
from engine.errors import ProgramExistsError, ProgramLimitError, UnknownProgramError
from engine.logprobs import TokenLogprob
from scheduler.deadlines import check_ttft_slo
from scheduler.ids import check_id
from scheduler.program_inference import ProgramInference
from server.auth import AuthError, TokenAuth
from server.call_stream import StreamDelta
from server.calls import CallRequest
from server.chat_output import OutputParsers, reasoning_parser_for
from server.door_backend import CallItems, DoorBackend, Headers
from server.errors import DrainingError
from server.http_errors import HttpError, http_error_of, sse_error_event
from server.inferred_programs import chat_items
from server.merged_streams import merged
from server.namespace import Namespace, new_id
from server.openai_echo import Echo, echoed_logprobs, prompt_arrays
from server.openai_logprobs import chat_logprobs, completion_logprobs, token_ids_of
from server.openai_protocol import (ChatCompletionRequest, CompletionRequest, chat_choice,
                                    chunk_delta, envelope, for_choice, fragment_chunk,
                                    now_seconds, text_choice, tool_calls_finish, usage)
from server.openai_responses import (ResponseEvents, ResponsesRequest, final_status,
                                     output_items, response_object, response_usage)
from server.prompts import PromptTokenizer
from server.response_store import ResponseStore, StoredResponse
from server.tool_parsers import ToolParser, make_tool_parser
from server.tool_parsers.forced import ForcedCallParser
from server.wire import SHUTDOWN, message_to_dict

T = TypeVar("T")
log = logging.getLogger(__name__)
ParserFactory = Callable[[], ToolParser]  # a fresh tool parser for one output
Prompt = str | list[int] | ChatPrompt  # one call's prompt, before tokenizing
PROGRAM_HEADERS = ("x-program-id", "x-session-id")
PROGRAM_CLASS_HEADER = "x-program-class"
DISCONNECT_POLL_SECONDS = 0.25  # how often a non-streamed request checks for its client
CLIENT_CLOSED_REQUEST = 499     # the status logged for a request whose client went away
NOT_STORED = ("no stored response has this id (it is unknown, expired, deleted or another "
              "tenant's)")
Keep = Callable[[dict[str, Any]], None]  # stores a finished response object


@dataclass(frozen=True)
class PreparedCalls:
    """A request's calls, validated and tokenized, not yet submitted: `calls` are (prompt
    token ids, choice index); `named` the program the client names (None: none), `named_id`
    its engine id; `parser` what the outputs go through (None: plain text); `headers` the
    request's; `items` what `--infer-programs` infers its program from (None: nothing to
    infer: the option is off, the client names a program, or not one chat prompt)."""

    ns: Namespace
    headers: tuple[tuple[str, str], ...]
    body: Any
    named: str | None
    named_id: str | None
    program_class: str | None
    params: SamplingParams
    parser: OutputParsers | None
    calls: list[tuple[list[int], int]]
    items: list[bytes] | None = None


@dataclass(frozen=True)
class StartedCalls:
    """A request's submitted calls: one stream per choice; `own_program` when the request
    started a program of its own (`program_id`, ended with the request); `named` the
    program the client named (None: none); `inferred` when `program_id` is the one
    `--infer-programs` chose (joined or new; TTL ends it); `parser` is what the outputs go
    through (reasoning split, tool calls; None: plain text); `headers` are the request's (a
    router forwards them); `prompt_ids` each call's prompt."""

    ns: Namespace
    headers: tuple[tuple[str, str], ...]
    streams: list[CallItems]
    own_program: bool
    program_id: str | None
    named: str | None
    parser: OutputParsers | None
    prompt_ids: list[list[int]]
    inferred: bool = False


class OpenAIDoor:
    """The handlers; `auth=None` turns authentication off; `responses` keeps the stored
    Responses; `tool_call_parser` and `reasoning_parser` name the formats chat outputs are
    parsed in (None: off); `inference` (None: off) infers the program of a chat request that
    names none (`--infer-programs`)."""

    def __init__(self, backend: DoorBackend, prompts: PromptTokenizer, auth: TokenAuth | None,
                 model_name: str, max_model_len: int, responses: ResponseStore,
                 tool_call_parser: str | None = None, reasoning_parser: str | None = None,
                 inference: ProgramInference | None = None) -> None:
        self.tool_call_parser = tool_call_parser
        self.reasoning_parser = reasoning_parser
        self.responses_store = responses
        self.inference = inference
        self.backend = backend
        self.prompts = prompts
        self.auth = auth
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

    async def run(self, ns: Namespace, awaitable: Awaitable[T]) -> T:
        """`awaitable`'s result, its request error as an HttpError (ids as `ns` knows them)."""
        try:
            return await awaitable
        except Exception as exc:
            raise http_error_of(ns.outer_error(exc)) from None

    # ----- info -------------------------------------------------------------------------
    async def models(self, request: Request) -> dict[str, Any]:
        self.namespace(request)
        return {"object": "list", "data": [{
            "id": self.model_name, "object": "model", "created": 0, "owned_by": "agentix",
            "max_model_len": self.max_model_len}]}

    # ----- programs ---------------------------------------------------------------------
    async def get_program(self, request: Request, program_id: str) -> dict[str, Any]:
        ns = self.namespace(request)
        inner = self.inner(ns, "program_id", program_id)
        return message_to_dict(await self.run(ns, self.backend.get_program(ns, inner)))

    async def end_program(self, request: Request, program_id: str) -> dict[str, Any]:
        ns = self.namespace(request)
        inner = self.inner(ns, "program_id", program_id)
        return message_to_dict(await self.run(ns, self.backend.end_program(
            ns, inner, tuple(request.headers.items()))))

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

    async def _output_parsers(self, body, tools: ParserFactory | None, params: SamplingParams,
                              prompt_ids: list[int]) -> OutputParsers | None:
        """What a request's outputs go through (None: plain text): `tools` (its tool
        parser), after a chat's reasoning split with the server's reasoning parser, unless
        a grammar constrains the output (a forced tool call, `response_format`: it leaves
        the model no room to reason)."""
        reasoning = None
        if self.reasoning_parser is not None and isinstance(body, ChatCompletionRequest) \
                and params.structured is None:
            reasoning = await reasoning_parser_for(self.reasoning_parser, prompt_ids,
                                                   self.prompts,
                                                   tools().call_marker if tools else None)
        if reasoning is None and tools is None:
            return None
        return OutputParsers(reasoning, tools, body.parallel_tool_calls)

    async def responses(self, request: Request, body: ResponsesRequest) -> Response:
        """`/v1/responses`: the request as chat (after the conversation of the response it
        continues), its output as a `response` (or its streamed events), stored once final
        (completed or incomplete) unless `store` is false; a failed or abandoned response
        is not stored. 400 naming `previous_response_id` when no stored response
        of the caller's has that id."""
        ns = self.namespace(request)
        unsupported = body.unsupported()
        if unsupported is not None:
            raise HttpError(400, f"{unsupported}: not supported by this server", unsupported)
        previous = None
        if body.previous_response_id is not None:
            previous = self.responses_store.get(ns.tenant, body.previous_response_id)
            if previous is None:
                raise HttpError(400, f"previous_response_id: {NOT_STORED}",
                                "previous_response_id")
        history = previous.continued() if previous is not None else []
        try:
            chat = body.to_chat(history)
        except ValueError as exc:
            raise http_error_of(exc) from None
        started, chain = await self._start_response(request, body, chat)
        response_id = f"resp_{ns.outer(started.streams[0].call_id)}"
        served = body.model_copy(update={"program_id": None if started.program_id is None
                                         else ns.outer(started.program_id)})
        keep = None if not body.store else functools.partial(
            self._keep, ns, response_id, [*history, *body.input_items()], chain)
        created = now_seconds()
        if body.stream:
            events = ResponseEvents(served, response_id, self.model_name, created)
            return StreamingResponse(self._response_sse(started, events, chat, keep),
                                     media_type="text/event-stream")
        completions = await self.finish_calls(request, started)
        if completions is None:  # the client went away: its calls are aborted
            return Response(status_code=CLIENT_CLOSED_REQUEST)
        completion = completions[0]
        parsed = started.parser.parse(completion.text) if started.parser else None
        response = response_object(
            served, response_id, self.model_name, created, final_status(completion),
            output_items(response_id, completion, parsed),
            response_usage(completion, parsed is not None and parsed.reasoning is not None))
        if keep is not None:
            keep(response)
        return JSONResponse(response)

    async def _start_response(self, request: Request, body: ResponsesRequest,
                              chat: ChatCompletionRequest) -> tuple[StartedCalls, str | None]:
        """Start a response's call; also the program of its chain (what to store with it).

        A program the client names wins. Else a response that continues none runs as a
        one-call program (nothing lingers) and its chain has no program yet; the first
        continuation of a response starts the chain's program (implicitly, for the tenant,
        ended by TTL) and records it on the response it continues, so later continuations
        of either, forks included, join it. The first response's own service is not in
        that program's record (an approximation). Should the chain's program have ended
        (TTL, or its end), the chain goes on in a new one; should a program cap refuse to
        start one, the response runs as a one-call program. Other refusals (a full waiting
        queue) are the client's. With `--infer-programs`, a response that continues none
        and names no program runs in the program inferred from its messages
        (`submit_inferred`), which its chain then keeps."""
        prepared = await self.prepare_calls(request, chat, lambda: [chat.chat()])
        ns = prepared.ns
        if prepared.named is not None or body.previous_response_id is None:
            submit = self.submit_calls if prepared.items is None else self.submit_inferred
            started = await self.run(ns, submit(prepared))
            return started, started.program_id
        return await self.run(ns, self._continue_chain(prepared, body.previous_response_id))

    async def _continue_chain(self, prepared: PreparedCalls, previous_id: str
                              ) -> tuple[StartedCalls, str]:
        """Submit a continuation of `previous_id` in its chain's program (request errors
        typed, as `submit_calls` raises them); also the chain's program."""
        tenant, store = prepared.ns.tenant, self.responses_store
        program = store.chain_program(tenant, previous_id, _new_program(prepared.ns))
        try:
            return await self._in_program(prepared, program), program
        except (UnknownProgramError, ProgramExistsError):  # it ended: unknown, recently ended
            program = store.chain_program(tenant, previous_id, _new_program(prepared.ns),
                                          ended=program)
            return await self._in_program(prepared, program), program

    async def _in_program(self, prepared: PreparedCalls, program: str) -> StartedCalls:
        """The calls submitted in `program`, or as a one-call program when a program cap
        keeps it from starting."""
        try:
            return await self.submit_calls(prepared, program)
        except ProgramLimitError:
            return await self.submit_calls(prepared)

    def _keep(self, ns: Namespace, response_id: str, conversation: list[dict[str, Any]],
              program_id: str | None, response: dict[str, Any]) -> None:
        """Store a finished response: what it answered, the object sent and its chain's
        program."""
        self.responses_store.put(ns.tenant, response_id,
                                 StoredResponse(conversation, response, program_id))

    async def get_response(self, request: Request, response_id: str) -> dict[str, Any]:
        """A stored response object; 404 when the caller has none of that id."""
        stored = self.responses_store.get(self.namespace(request).tenant, response_id)
        if stored is None:
            raise HttpError(404, NOT_STORED)
        return stored.response

    async def delete_response(self, request: Request, response_id: str) -> dict[str, Any]:
        """Forget a stored response (its program goes on); 404 as `get_response`."""
        if not self.responses_store.delete(self.namespace(request).tenant, response_id):
            raise HttpError(404, NOT_STORED)
        return {"id": response_id, "object": "response", "deleted": True}

    async def _response_sse(self, started: StartedCalls, events: ResponseEvents,
                            chat: ChatCompletionRequest, keep: Keep | None
                            ) -> AsyncIterator[str]:
        """A response's event stream (a client that goes away aborts the call); `keep`
        stores the response object of its final event (completed or incomplete,
        `events.final`) before that event is sent."""
        parser = started.parser.stream() if started.parser else None
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
                    finished = events.finish(item.completion)
                    if keep is not None:
                        keep(events.final)
                    for event in finished:
                        yield event
        except Exception as exc:  # the call's stream ended in a request error
            for event in events.fail(http_error_of(started.ns.outer_error(exc)).message):
                yield event
        finally:
            await self.end_calls(started)

    async def completions(self, request: Request, body: CompletionRequest) -> Response:
        return await self._generate(request, body, "text_completion", body.prompt_values)

    async def _generate(self, request: Request, body, kind: str,
                        prompts_of: Callable[[], list[Prompt]]) -> Response:
        started = await self.start_calls(request, body, prompts_of)
        try:
            echo = await Echo.of(body, self.prompts)
        except BaseException:
            await self.end_calls(started)
            raise
        ns, parser = started.ns, started.parser
        response_id = (f"{'chatcmpl' if kind == 'chat.completion' else 'cmpl'}-"
                       f"{ns.outer(started.streams[0].call_id)}")
        if body.stream:
            chunk_kind = "chat.completion.chunk" if kind == "chat.completion" else kind
            return StreamingResponse(self._sse(started, chunk_kind, response_id, body, echo),
                                     media_type="text/event-stream")
        completions = await self.finish_calls(request, started)
        if completions is None:  # the client went away: its calls are aborted
            return Response(status_code=CLIENT_CLOSED_REQUEST)
        if kind == "chat.completion":
            choices = [chat_choice(i, c, body.return_token_ids,
                                   parser.parse(c.text) if parser else None,
                                   await self._logprobs(kind, c.logprobs))
                       for i, c in enumerate(completions)]
        elif echo is not None:
            completions = [echo.completion(c) for c in completions]
            choices = [text_choice(i, c, body.return_token_ids,
                                   await echoed_logprobs(self.prompts, c), echo.texts[i])
                       for i, c in enumerate(completions)]
        else:
            choices = [text_choice(i, c, body.return_token_ids,
                                   await self._logprobs(kind, c.logprobs))
                       for i, c in enumerate(completions)]
        return JSONResponse(envelope(
            kind, response_id, self.model_name, now_seconds(), choices,
            usage=usage(completions, body.n),
            program_id=(ns.outer(started.program_id) if started.named or started.inferred
                        else "")))

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
        """`prepare_calls`, then `submit_calls` in the program `--infer-programs` finds or
        starts for it (`submit_inferred`; a request of one chat prompt naming no program),
        else with no program of the door's (its request error as an HttpError)."""
        prepared = await self.prepare_calls(request, body, prompts_of)
        if prepared.items is not None:
            return await self.run(prepared.ns, self.submit_inferred(prepared))
        return await self.run(prepared.ns, self.submit_calls(prepared))

    async def prepare_calls(self, request: Request, body,
                            prompts_of: Callable[[], list[Prompt]]) -> PreparedCalls:
        """Authenticate, validate and tokenize a request's calls, `n` per prompt in order
        (HttpError naming what is wrong); with `--infer-programs`, the items its program is
        inferred from (a single chat prompt naming no program)."""
        ns = self.namespace(request)
        self.check_model(body.model)
        unsupported = body.unsupported()
        if unsupported is not None:
            raise HttpError(400, f"{unsupported}: not supported by this server", unsupported)
        tools = self._tool_parser(body)
        named = _named_program(request, body)
        program_class = request.headers.get(PROGRAM_CLASS_HEADER, body.program_class)
        try:
            given = prompts_of()
            prompts = [await self.prompts.token_ids(p) for p in given]
            params = body.sampling_params(body.requested_max_tokens() or self.max_model_len)
            if params.structured is not None and self.prompts is not None:
                await self.prompts.compile_grammar(params.structured, body.grammar_field())
            for field, value in (("thread_id", body.thread_id),
                                 ("program_class", program_class)):
                if value is not None:
                    check_id(field, value)
            check_ttft_slo(body.ttft_slo_seconds)
            named_id = None if named is None else ns.inner("program_id", named)
        except ValueError as exc:
            raise http_error_of(exc) from None
        parser = await self._output_parsers(body, tools, params, prompts[0])
        calls = [(token_ids, i * body.n + j) for i, token_ids in enumerate(prompts)
                 for j in range(body.n)]
        items = chat_items(given) if named is None and self.inference is not None else None
        return PreparedCalls(ns, tuple(request.headers.items()), body, named, named_id,
                             program_class, params, parser, calls, items)

    async def submit_calls(self, prepared: PreparedCalls, program: str | None = None
                           ) -> StartedCalls:
        """Submit the prepared calls, or raise the backend's request error as it raised it
        (typed, ids the engine's) with nothing left submitted. Their program: the client's,
        else `program` (an engine id; started if unknown), else a one-call program, or with
        several calls one of the request's own (ended with the request)."""
        ns, body, calls, headers = prepared.ns, prepared.body, prepared.calls, prepared.headers
        program_id = prepared.named_id if prepared.named_id is not None else program
        own_program = program_id is None and len(calls) > 1
        if own_program:
            program_id = _new_program(ns)
            await self.backend.start_program(ns, program_id, prepared.program_class)
        streams: list[CallItems] = []
        try:
            for token_ids, index in calls:
                thread = (body.thread_id if len(calls) == 1 else
                          f"{body.thread_id or 'choice'}-{index}")
                streams.append(await self.backend.submit(ns, CallRequest(
                    program_id=program_id, call_id=ns.inner("call_id", new_id("call")),
                    prompt=token_ids, params=for_choice(prepared.params, index),
                    tenant=ns.tenant, thread_id=thread,
                    expected_tool_seconds=body.expected_tool_seconds, start_unknown=True,
                    program_class=prepared.program_class,
                    ttft_slo_seconds=body.ttft_slo_seconds), headers))
        except BaseException:
            for stream in streams:
                stream.cancel()
            await self._end_own(ns, headers, own_program, program_id)
            raise
        return StartedCalls(ns, headers, streams, own_program, program_id, prepared.named,
                            prepared.parser, [token_ids for token_ids, _ in calls])

    async def submit_inferred(self, prepared: PreparedCalls) -> StartedCalls:
        """Submit calls whose program `--infer-programs` infers from `prepared.items`: the
        program of the earlier request they extend, if it is still alive (ended since: as
        if none was found); else a new program (implicitly started, for the tenant, ended
        by TTL), recorded once the calls are in. With several calls and nothing found, the
        request's own program; past a program cap, a one-call program (neither recorded).
        Request errors typed, as `submit_calls` raises them."""
        tenant, items = prepared.ns.tenant, prepared.items
        joined = self.inference.join(tenant, items, time.monotonic())
        started = None
        if joined is not None:
            try:
                started = await self.submit_calls(prepared, joined)
            except (UnknownProgramError, ProgramExistsError):  # unknown, or recently ended
                pass
        elif len(prepared.calls) > 1:
            return await self.submit_calls(prepared)
        if started is None:
            started = await self._in_program(prepared, _new_program(prepared.ns))
            if started.program_id is None:
                return started
        self.inference.record(tenant, items, started.program_id, time.monotonic())
        return replace(started, inferred=True)

    async def finish_calls(self, request: Request, started: StartedCalls
                           ) -> list[CompletionOutput] | None:
        """The started calls' completions (None if the client went away: they are aborted);
        the calls end here either way. HttpError 500 or 503 for a call the engine failed or
        the shutdown cut, the request error a call's stream ended in otherwise."""
        try:
            completions = await self.run(started.ns,
                                         _until_done_or_gone(request, started.streams))
        finally:
            await self.end_calls(started)
        if completions is None:
            return None
        if any(c.finish_reason == "error" for c in completions):
            raise HttpError(500, "internal error: the engine failed while running this call")
        if any(c.finish_reason == SHUTDOWN for c in completions):
            raise HttpError(503, "the server is shutting down: this call was cut; retry it")
        return completions

    async def _echo_chunk(self, echo: Echo, index: int, prompt_ids: list[int],
                          entries: list[TokenLogprob | None] | None, ids: bool
                          ) -> tuple[dict[str, Any], int]:
        """Choice `index`'s echo chunk (its prompt's text, and logprobs when `entries`), and
        the characters its output's `text_offset` counts from."""
        if entries is None:
            return chunk_delta("text_completion", index, echo.texts[index],
                               [] if ids else None, None), 0
        logprobs = await prompt_arrays(self.prompts, prompt_ids, entries)
        return (chunk_delta("text_completion", index, echo.texts[index], [] if ids else None,
                            None, logprobs=logprobs),
                sum(len(token) for token in logprobs["tokens"]))

    async def end_calls(self, started: StartedCalls) -> None:
        """Abort what is left of the calls, end the request's own program."""
        for stream in started.streams:
            stream.cancel()
        await self._end_own(started.ns, started.headers, started.own_program,
                            started.program_id)

    async def _end_own(self, ns: Namespace, headers: Headers, own_program: bool,
                       program_id: str | None) -> None:
        if own_program and program_id is not None:
            try:
                await self.backend.end_program(ns, program_id, headers)
            except (UnknownProgramError, DrainingError):
                pass

    async def _sse(self, started: StartedCalls, kind: str, response_id: str, body,
                   echo: Echo | None) -> AsyncIterator[str]:
        """The SSE body: a role chunk per choice (chat), the choices' deltas interleaved as
        they come (through the calls' parsers, as their fragments: reasoning_content, then
        content and each tool call's opening and arguments), a finish chunk per choice, the
        usage chunk if asked for, `[DONE]`; with `echo`, a choice's first chunk is its prompt (and the prompt's
        logprobs). A call's stream that ends in an error sends an error event (OpenAI's
        error body) and `[DONE]` instead. A client that goes away aborts the calls (the
        generator is closed)."""
        streams, parser = started.streams, started.parser
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
            calls = [parser.stream() if parser else None for _ in streams]
            offsets = [0] * len(streams)  # characters streamed per choice (text_offset)
            echoed: set[int] = set()  # choices whose echo chunk went out
            async with contextlib.aclosing(merged(streams)) as items:
                async for index, item in items:
                    parsed = calls[index]
                    if isinstance(item, StreamDelta) and echo is not None \
                            and index not in echoed:
                        echoed.add(index)
                        chunk, offsets[index] = await self._echo_chunk(
                            echo, index, started.prompt_ids[index], item.prompt_logprobs, ids)
                        yield event([chunk])
                    if isinstance(item, StreamDelta) and echo is not None and echo.only:
                        continue
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
                    completion = echo.completion(item.completion) if echo else item.completion
                    completions[index] = completion
                    reason = completion.finish_reason
                    if parsed is not None:
                        for fragment in parsed.finish():
                            yield event([fragment_chunk(index, fragment, [] if ids else None)])
                        reason = tool_calls_finish(reason) if parsed.made_calls else reason
                    yield event([chunk_delta(kind, index, "", [] if ids else None, reason)])
            if body.include_usage():
                yield event([], usage=usage(completions, body.n))
        except Exception as exc:
            yield sse_error_event(http_error_of(started.ns.outer_error(exc)))
        finally:
            await self.end_calls(started)
        yield "data: [DONE]\n\n"


def _named_program(request: Request, body) -> str | None:
    """The program the client names: the X-Program-Id (or X-Session-Id) header, else the
    body's `program_id` (None: none)."""
    return next((request.headers[h] for h in PROGRAM_HEADERS if h in request.headers),
                body.program_id)


def _new_program(ns: Namespace) -> str:
    """A fresh program id of the caller's (its engine id)."""
    return ns.inner("program_id", new_id("prog"))


async def _until_done_or_gone(request: Request, streams: list[CallItems]
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


async def _collect(stream: CallItems) -> CompletionOutput:
    async for item in stream:
        if not isinstance(item, StreamDelta):
            return item.completion
    raise RuntimeError("stream ended without a final item")

