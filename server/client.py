"""The Agentix client library: programs, calls and streams over gRPC (see server/agentix.proto).

    with AgentixClient("127.0.0.1:50051") as client, client.program() as prog:
        print(prog.generate("Hello", max_tokens=8).text)

`AgentixClient` is blocking; `AsyncAgentixClient` has the same shape over `grpc.aio`. Every RPC
error surfaces as `AgentixError`. A prompt is a `str` (tokenized by the server as is), a
sequence of token ids, or chat messages `[{"role": "user", "content": "Hi"}, ...]` (the server
applies the model's chat template). Sampling keywords: temperature, top_p, top_k, seed,
max_tokens, stop, stop_token_ids, ignore_eos; besides them the call fields
`expected_tool_seconds` (the tool time after the call) and `ttft_slo_seconds` (the call's
first-token deadline, seconds after it arrives); any other key raises `TypeError` before an
RPC is made, and a key given as `None` is left at the server's default.

Retries: `generate(..., retries=N)` (or `retry_unavailable=N` on the client, the default of
every `generate`) re-sends a call that failed with UNAVAILABLE (a replica lost mid-stream
behind a router, a draining server) up to N times, with the same call id (one is chosen
here when the caller gave none), after RETRY_BACKOFF_SECONDS x the attempt number. Only
`generate` and `generate_many` retry: a retried call starts over, which a stream's consumer
would see as repeated deltas.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, AsyncIterator, Iterator, Sequence, Union

import grpc
from google.protobuf.message import Message

from server import agentix_pb2, agentix_pb2_grpc
from server.wire import message_to_dict

Prompt = Union[str, Sequence[int], Sequence[dict]]
SAMPLING_KEYS = frozenset({"temperature", "top_p", "top_k", "seed", "max_tokens", "stop",
                           "stop_token_ids", "ignore_eos"})
CALL_KEYS = ("expected_tool_seconds", "ttft_slo_seconds")  # GenerateRequest's own fields
RETRY_BACKOFF_SECONDS = 0.1


def _retry_plan(retries: int | None, default: int, call_id: str | None
                ) -> tuple[int, str | None]:
    """(retries, call id): a retried call needs an id of its own choosing to reuse."""
    retries = default if retries is None else retries
    if not isinstance(retries, int) or retries < 0:
        raise ValueError(f"retries must be an int >= 0, got {retries!r}")
    if retries and not call_id:
        call_id = f"call-{secrets.token_hex(8)}"
    return retries, call_id


def _should_retry(error: AgentixError, attempt: int, retries: int) -> bool:
    return error.code == grpc.StatusCode.UNAVAILABLE and attempt < retries


class AgentixError(Exception):
    """An RPC failed: `code` is the grpc.StatusCode, `details` the server's message."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(code, details)
        self.code = code
        self.details = details

    def __str__(self) -> str:
        return f"{self.code.name}: {self.details}"


@dataclass(frozen=True)
class Usage:
    """A call's tokens (prompt, of which served from cache, generated) and its seconds queued
    and in service, as the server counted them."""

    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    queue_seconds: float
    service_seconds: float


@dataclass(frozen=True)
class Completion:
    """A finished call. `text` is the server's whole completion (stop string cut off);
    `token_ids` are all the ids it streamed."""

    call_id: str
    text: str
    token_ids: tuple[int, ...]
    finish_reason: str
    usage: Usage


@dataclass(frozen=True)
class Delta:
    """Tokens a call produced since its previous delta."""

    call_id: str
    token_ids: tuple[int, ...]
    text: str


# --- request building and response parsing, shared by the sync and async clients ---

def _start_request(tenant: str | None, program_id: str | None,
                   program_class: str | None) -> agentix_pb2.StartProgramRequest:
    """A StartProgramRequest; None leaves a field unset (empty), for the server to choose."""
    return agentix_pb2.StartProgramRequest(program_id=program_id or "", tenant=tenant or "",
                                           program_class=program_class or "")


def _sampling_params(sampling: dict[str, Any]) -> agentix_pb2.SamplingParams:
    """The wire SamplingParams; raises TypeError naming an unknown key. Keys given as None are
    not set (so the optional fields top_p, seed and max_tokens stay unset)."""
    unknown = sorted(set(sampling) - SAMPLING_KEYS)
    if unknown:
        raise TypeError(f"unknown sampling parameter(s): {', '.join(unknown)}")
    given = {k: v for k, v in sampling.items() if v is not None}
    if isinstance(given.get("stop"), str):
        given["stop"] = [given["stop"]]
    return agentix_pb2.SamplingParams(**given)


def _generate_request(program_id: str | None, prompt: Prompt, thread_id: str | None,
                      call_id: str | None, sampling: dict[str, Any]
                      ) -> agentix_pb2.GenerateRequest:
    """A GenerateRequest; raises TypeError for an unknown sampling key or a bad prompt type.
    CALL_KEYS among the keyword arguments (`expected_tool_seconds`, the call's tool-time hint;
    `ttft_slo_seconds`, its first-token deadline) are the request's optional fields, not
    sampling parameters; None leaves one unset."""
    sampling = dict(sampling)
    fields = {key: sampling.pop(key) for key in CALL_KEYS if key in sampling}
    request = agentix_pb2.GenerateRequest(
        program_id=program_id or "", thread_id=thread_id or "", call_id=call_id or "",
        sampling=_sampling_params(sampling),
        **{key: value for key, value in fields.items() if value is not None})
    if isinstance(prompt, str):
        request.text = prompt
    elif isinstance(prompt, Sequence) and prompt and all(isinstance(m, dict) for m in prompt):
        request.messages.messages.extend(
            agentix_pb2.ChatMessage(role=m.get("role", ""), content=m.get("content", ""))
            for m in prompt)
    elif isinstance(prompt, Sequence) and not isinstance(prompt, (bytes, bytearray)):
        request.token_ids.ids.extend(prompt)
    else:
        raise TypeError(f"prompt must be a str, a sequence of token ids or of chat messages, "
                        f"got {type(prompt).__name__}")
    return request


class _StreamAssembler:
    """Turns one call's GenerateResponses into Deltas and, from the final message, the
    Completion (whose token_ids are every id the deltas carried)."""

    def __init__(self) -> None:
        self.token_ids: list[int] = []
        self.completion: Completion | None = None

    def feed(self, response: agentix_pb2.GenerateResponse) -> Delta | Completion:
        if response.WhichOneof("kind") == "final":
            final = response.final
            u = final.usage
            usage = Usage(u.prompt_tokens, u.cached_tokens, u.completion_tokens,
                          u.queue_seconds, u.service_seconds)
            self.completion = Completion(response.call_id, final.text, tuple(self.token_ids),
                                         final.finish_reason, usage)
            return self.completion
        ids = tuple(response.delta.token_ids)
        self.token_ids.extend(ids)
        return Delta(response.call_id, ids, response.delta.text)

    def check_finished(self) -> None:
        """Raise AgentixError if the stream ended without its final message."""
        if self.completion is None:
            raise AgentixError(grpc.StatusCode.UNKNOWN, "stream ended without a final message")


def _error_from(error: grpc.RpcError) -> AgentixError:
    code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    details = error.details() if hasattr(error, "details") else str(error)
    return AgentixError(code, details or "")


class _ClientBase:
    def __init__(self, token: str | None, timeout: float | None,
                 retry_unavailable: int = 0) -> None:
        self._metadata = (("authorization", f"Bearer {token}"),) if token else ()
        self._timeout = timeout
        self.retry_unavailable, _ = _retry_plan(retry_unavailable, 0, "given")

    def _options(self) -> dict[str, Any]:
        return {"metadata": self._metadata, "timeout": self._timeout}


class _ProgramBase:
    """What the sync and async programs share: the id (None until a `with` block starts it)
    and request building."""

    def __init__(self, client: Any, program_id: str | None, *, tenant: str | None = None,
                 proposed_id: str | None = None, program_class: str | None = None) -> None:
        self.client = client
        self.program_id = program_id
        self.end_info: dict[str, Any] | None = None
        self._tenant = tenant
        self._proposed_id = proposed_id
        self._program_class = program_class

    def _started_id(self) -> str:
        if self.program_id is None:
            raise RuntimeError("program not started: enter its `with` block first")
        return self.program_id

    def _request(self, prompt: Prompt, thread_id: str | None, call_id: str | None,
                 sampling: dict[str, Any]) -> agentix_pb2.GenerateRequest:
        return _generate_request(self._started_id(), prompt, thread_id, call_id, sampling)


# --- blocking client ---

class AgentixClient(_ClientBase):
    """A blocking client over one insecure channel to `address` ("host:port"). With `token`,
    every RPC carries `authorization: Bearer <token>`; `timeout` (seconds) is each RPC's
    deadline, a stream's included; `retry_unavailable` is the default `retries` of every
    `generate` (see the module docstring). Use as a context manager or call `close()`."""

    def __init__(self, address: str, token: str | None = None,
                 timeout: float | None = None, retry_unavailable: int = 0) -> None:
        super().__init__(token, timeout, retry_unavailable)
        self._channel = grpc.insecure_channel(address)
        self._stub = agentix_pb2_grpc.AgentixStub(self._channel)

    def __enter__(self) -> AgentixClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self._channel.close()

    def _unary(self, method: Any, request: Message) -> Any:
        try:
            return method(request, **self._options())
        except grpc.RpcError as error:
            raise _error_from(error) from error

    def start_program(self, tenant: str | None = None, program_id: str | None = None,
                      program_class: str | None = None) -> Program:
        """StartProgram now; the caller must `end()` it (or let the server's TTL expire it).
        `program_class` labels the kind of program (the server's `gittins` policy learns
        program sizes per tenant and class); the server checks it like an id."""
        request = _start_request(tenant, program_id, program_class)
        return Program(self, self._unary(self._stub.StartProgram, request).program_id)

    def program(self, tenant: str | None = None, program_id: str | None = None,
                program_class: str | None = None) -> Program:
        """A program for a `with` block: started on enter (see `start_program`), ended on
        exit (failed when the block raised)."""
        return Program(self, None, tenant=tenant, proposed_id=program_id,
                       program_class=program_class)

    def generate(self, prompt: Prompt, *, retries: int | None = None,
                 **sampling: Any) -> Completion:
        """One call in a one-call program of its own (`retries`: see the module docstring)."""
        return self._generate(_generate_request(None, prompt, None, None, sampling), retries)

    def _generate(self, request: agentix_pb2.GenerateRequest,
                  retries: int | None) -> Completion:
        retries, request.call_id = _retry_plan(retries, self.retry_unavailable,
                                               request.call_id)
        attempt = 0
        while True:
            try:
                return _run_to_completion(self._stream(request))
            except AgentixError as error:
                if not _should_retry(error, attempt, retries):
                    raise
            attempt += 1
            time.sleep(RETRY_BACKOFF_SECONDS * attempt)

    def stream(self, prompt: Prompt, **sampling: Any) -> Iterator[Delta | Completion]:
        """One call in a one-call program of its own, streamed (see `Program.stream`)."""
        return self._stream(_generate_request(None, prompt, None, None, sampling))

    def _stream(self, request: agentix_pb2.GenerateRequest) -> Iterator[Delta | Completion]:
        call = self._stub.Generate(request, **self._options())
        assembler = _StreamAssembler()
        try:
            for response in call:
                yield assembler.feed(response)
        except grpc.RpcError as error:
            raise _error_from(error) from error
        finally:
            call.cancel()  # a no-op once the stream is done; aborts the call if left early
        assembler.check_finished()

    def model_info(self) -> dict[str, Any]:
        return message_to_dict(self._unary(self._stub.ModelInfo, agentix_pb2.ModelInfoRequest()))

    def engine_stats(self, top_programs: int = 0) -> dict[str, Any]:
        """The server's live load and counters, with its `top_programs` (0..100) programs
        of most service (with auth on, the caller's own)."""
        request = agentix_pb2.EngineStatsRequest(top_programs=top_programs)
        return message_to_dict(self._unary(self._stub.EngineStats, request))

    def get_program(self, program_id: str) -> dict[str, Any]:
        """The program's process-table record (`active_calls` a list of dicts)."""
        request = agentix_pb2.GetProgramRequest(program_id=program_id)
        return message_to_dict(self._unary(self._stub.GetProgram, request))

    def abort(self, call_id: str) -> bool:
        """Abort a call; False if it is unknown or already finished."""
        request = agentix_pb2.AbortRequest(call_id=call_id)
        return self._unary(self._stub.Abort, request).aborted

    def _end_program(self, program_id: str, failed: bool) -> dict[str, Any]:
        request = agentix_pb2.EndProgramRequest(program_id=program_id, failed=failed)
        return message_to_dict(self._unary(self._stub.EndProgram, request))


def _run_to_completion(items: Iterator[Delta | Completion]) -> Completion:
    last = None
    for last in items:
        pass
    assert isinstance(last, Completion)  # _stream raises otherwise
    return last


class Program(_ProgramBase):
    """One program on the server. From `client.start_program()` it is started; from
    `client.program()` it starts on entering the `with` block and ends on leaving it (with
    `failed=True` if the block raised; the block's exception propagates and an error from
    EndProgram is then dropped). `end_info` holds EndProgram's totals once ended."""

    client: AgentixClient

    def __enter__(self) -> Program:
        if self.program_id is None:
            self.program_id = self.client.start_program(self._tenant, self._proposed_id,
                                                        self._program_class).program_id
        return self

    def __exit__(self, exc_type: type | None, exc: BaseException | None, tb: Any) -> None:
        if self.end_info is not None:
            return
        try:
            self.end(failed=exc is not None)
        except AgentixError:
            if exc is None:
                raise

    def generate(self, prompt: Prompt, *, thread_id: str | None = None,
                 call_id: str | None = None, retries: int | None = None,
                 **sampling: Any) -> Completion:
        """Run one call to completion; `retries` (default: the client's
        `retry_unavailable`) re-sends it with the same call id on UNAVAILABLE."""
        return self.client._generate(self._request(prompt, thread_id, call_id, sampling),
                                     retries)

    def stream(self, prompt: Prompt, *, thread_id: str | None = None,
               call_id: str | None = None, **sampling: Any) -> Iterator[Delta | Completion]:
        """A Delta per server delta, then the Completion. The request is checked now (TypeError
        for a bad key); the RPC starts on the first `next()`. Leaving the iteration early
        (break, or closing the generator) cancels the RPC, and the server aborts the call."""
        return self.client._stream(self._request(prompt, thread_id, call_id, sampling))

    def generate_many(self, prompts: Sequence[Prompt], *, retries: int | None = None,
                      **sampling: Any) -> list[Completion]:
        """Run the calls at once, one thread each (thread ids "t0", "t1", ...); completions in
        prompt order. Waits for every call; then raises the first error in prompt order."""
        requests = [self._request(p, f"t{i}", None, sampling) for i, p in enumerate(prompts)]
        if not requests:
            return []
        with ThreadPoolExecutor(max_workers=len(requests)) as pool:
            futures = [pool.submit(self.client._generate, r, retries) for r in requests]
            return [f.result() for f in futures]  # leaving the pool waits for every call

    def info(self) -> dict[str, Any]:
        """The program's process-table record (see `AgentixClient.get_program`)."""
        return self.client.get_program(self._started_id())

    def end(self, failed: bool = False) -> dict[str, Any]:
        """EndProgram: the server aborts its active calls; returns (and keeps as `end_info`)
        its final record."""
        self.end_info = self.client._end_program(self._started_id(), failed)
        return self.end_info


# --- asyncio client ---

class AsyncAgentixClient(_ClientBase):
    """`AgentixClient` over `grpc.aio`: the same methods as coroutines (`stream` returns an
    async iterator). Create it inside the running event loop; `await close()` or use
    `async with`."""

    def __init__(self, address: str, token: str | None = None,
                 timeout: float | None = None, retry_unavailable: int = 0) -> None:
        super().__init__(token, timeout, retry_unavailable)
        self._channel = grpc.aio.insecure_channel(address)
        self._stub = agentix_pb2_grpc.AgentixStub(self._channel)

    async def __aenter__(self) -> AsyncAgentixClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._channel.close()

    async def _unary(self, method: Any, request: Message) -> Any:
        try:
            return await method(request, **self._options())
        except grpc.RpcError as error:
            raise _error_from(error) from error

    async def start_program(self, tenant: str | None = None, program_id: str | None = None,
                            program_class: str | None = None) -> AsyncProgram:
        """See `AgentixClient.start_program`."""
        request = _start_request(tenant, program_id, program_class)
        response = await self._unary(self._stub.StartProgram, request)
        return AsyncProgram(self, response.program_id)

    def program(self, tenant: str | None = None, program_id: str | None = None,
                program_class: str | None = None) -> AsyncProgram:
        """A program for an `async with` block (see `Program`)."""
        return AsyncProgram(self, None, tenant=tenant, proposed_id=program_id,
                            program_class=program_class)

    async def generate(self, prompt: Prompt, *, retries: int | None = None,
                       **sampling: Any) -> Completion:
        return await self._generate(_generate_request(None, prompt, None, None, sampling),
                                    retries)

    async def _generate(self, request: agentix_pb2.GenerateRequest,
                        retries: int | None) -> Completion:
        retries, request.call_id = _retry_plan(retries, self.retry_unavailable,
                                               request.call_id)
        attempt = 0
        while True:
            try:
                return await _arun_to_completion(self._stream(request))
            except AgentixError as error:
                if not _should_retry(error, attempt, retries):
                    raise
            attempt += 1
            await asyncio.sleep(RETRY_BACKOFF_SECONDS * attempt)

    def stream(self, prompt: Prompt, **sampling: Any) -> AsyncIterator[Delta | Completion]:
        return self._stream(_generate_request(None, prompt, None, None, sampling))

    async def _stream(self, request: agentix_pb2.GenerateRequest
                      ) -> AsyncIterator[Delta | Completion]:
        call = self._stub.Generate(request, **self._options())
        assembler = _StreamAssembler()
        try:
            async for response in call:
                yield assembler.feed(response)
        except grpc.RpcError as error:
            raise _error_from(error) from error
        finally:
            call.cancel()
        assembler.check_finished()

    async def model_info(self) -> dict[str, Any]:
        request = agentix_pb2.ModelInfoRequest()
        return message_to_dict(await self._unary(self._stub.ModelInfo, request))

    async def engine_stats(self, top_programs: int = 0) -> dict[str, Any]:
        request = agentix_pb2.EngineStatsRequest(top_programs=top_programs)
        return message_to_dict(await self._unary(self._stub.EngineStats, request))

    async def get_program(self, program_id: str) -> dict[str, Any]:
        request = agentix_pb2.GetProgramRequest(program_id=program_id)
        return message_to_dict(await self._unary(self._stub.GetProgram, request))

    async def abort(self, call_id: str) -> bool:
        request = agentix_pb2.AbortRequest(call_id=call_id)
        return (await self._unary(self._stub.Abort, request)).aborted

    async def _end_program(self, program_id: str, failed: bool) -> dict[str, Any]:
        request = agentix_pb2.EndProgramRequest(program_id=program_id, failed=failed)
        return message_to_dict(await self._unary(self._stub.EndProgram, request))


async def _arun_to_completion(items: AsyncIterator[Delta | Completion]) -> Completion:
    last = None
    async for last in items:
        pass
    assert isinstance(last, Completion)  # _stream raises otherwise
    return last


class AsyncProgram(_ProgramBase):
    """`Program` for `AsyncAgentixClient`. Leaving `async for item in prog.stream(...)` early
    cancels the RPC when the generator is closed: at once with `contextlib.aclosing`, else
    when asyncio finalizes it."""

    client: AsyncAgentixClient

    async def __aenter__(self) -> AsyncProgram:
        if self.program_id is None:
            started = await self.client.start_program(self._tenant, self._proposed_id,
                                                      self._program_class)
            self.program_id = started.program_id
        return self

    async def __aexit__(self, exc_type: type | None, exc: BaseException | None,
                        tb: Any) -> None:
        if self.end_info is not None:
            return
        try:
            await self.end(failed=exc is not None)
        except AgentixError:
            if exc is None:
                raise

    async def generate(self, prompt: Prompt, *, thread_id: str | None = None,
                       call_id: str | None = None, retries: int | None = None,
                       **sampling: Any) -> Completion:
        return await self.client._generate(self._request(prompt, thread_id, call_id, sampling),
                                           retries)

    def stream(self, prompt: Prompt, *, thread_id: str | None = None,
               call_id: str | None = None, **sampling: Any) -> AsyncIterator[Delta | Completion]:
        return self.client._stream(self._request(prompt, thread_id, call_id, sampling))

    async def generate_many(self, prompts: Sequence[Prompt], *, retries: int | None = None,
                            **sampling: Any) -> list[Completion]:
        """As `Program.generate_many`, with asyncio.gather."""
        requests = [self._request(p, f"t{i}", None, sampling) for i, p in enumerate(prompts)]
        results = await asyncio.gather(*(self.client._generate(r, retries) for r in requests),
                                       return_exceptions=True)
        error = next((r for r in results if isinstance(r, BaseException)), None)
        if error is not None:
            raise error
        return list(results)

    async def info(self) -> dict[str, Any]:
        return await self.client.get_program(self._started_id())

    async def end(self, failed: bool = False) -> dict[str, Any]:
        self.end_info = await self.client._end_program(self._started_id(), failed)
        return self.end_info
