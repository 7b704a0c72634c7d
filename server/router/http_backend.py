"""The OpenAI door on a router (`server.door_backend.DoorBackend`): the door's code as on one
server, its calls routed as gRPC Generate calls are (`RouterServicer.route`: program ids,
placement, priority forwarding, failover).

The door tokenizes with the router's tokenizer and sends token ids, so the replicas see
the prompt the door rendered; its tool parser and grammar checks run here too. A program an
HTTP request names and the router does not know is started in the router's records, as a
single server starts it (then on a replica when a call of it is placed there). A call's
wire messages become the door's items: deltas, then a CompletionOutput built from them and
the final message (`num_preemptions` is not on the wire: 0). Sampling floats cross the wire
as 32-bit floats.
"""

from __future__ import annotations

import asyncio
from typing import AsyncIterator, Callable

from engine import CompletionOutput
from engine.errors import UnknownProgramError
from engine.logprobs import TokenLogprob
from server import agentix_pb2 as pb
from server import convert
from server.call_stream import MAX_UNREAD_ITEMS, StreamDelta, StreamFinal, StreamItem
from server.calls import CallRequest
from server.door_backend import Headers
from server.namespace import Namespace
from server.router.service import RouterServicer
from server.wire import program_info


class RouterBackend:
    """The door's calls and programs through `servicer` (on the router's event loop)."""

    def __init__(self, servicer: RouterServicer) -> None:
        self.servicer = servicer
        self.router = servicer.router

    def unavailable(self) -> str | None:
        if self.servicer.draining:
            return "the router is shutting down"
        if not self.router.healthy():
            return "no replica is serving"
        return None

    async def submit(self, ns: Namespace, call: CallRequest, headers: Headers
                     ) -> RoutedItems:
        if call.program_id is not None and call.start_unknown:
            try:
                self.router.programs.get(call.program_id)
            except UnknownProgramError:
                self.servicer.admit_program(ns, ns.outer(call.program_id), call.tenant,
                                            call.program_class)
        request = pb.GenerateRequest(
            program_id=ns.outer(call.program_id) if call.program_id is not None else "",
            thread_id=call.thread_id or "", call_id=ns.outer(call.call_id),
            token_ids=pb.TokenIds(ids=call.prompt),
            sampling=convert.sampling_message(call.params))
        if call.expected_tool_seconds is not None:
            request.expected_tool_seconds = call.expected_tool_seconds
        if call.ttft_slo_seconds is not None:
            request.ttft_slo_seconds = call.ttft_slo_seconds
        responses = await self.servicer.route(ns, request, headers, None)
        return RoutedItems(call, responses, self.router.clock)

    async def start_program(self, ns: Namespace, program_id: str,
                            program_class: str | None) -> None:
        self.servicer.admit_program(ns, ns.outer(program_id), ns.tenant, program_class)

    async def get_program(self, ns: Namespace, program_id: str) -> pb.ProgramInfo:
        return program_info(self.router.programs.get(program_id), ns.outer)

    async def end_program(self, ns: Namespace, program_id: str,
                          headers: Headers) -> pb.ProgramInfo:
        record = await self.router.end_program(program_id, False,
                                               self.router.forwarded(headers))
        return program_info(record, ns.outer)


class RoutedItems:
    """One routed call's items (`server.door_backend.CallItems`): a task of its own pumps
    its responses into a queue of at most MAX_UNREAD_ITEMS items (past that it stops
    reading, and gRPC's flow control holds the replica back, which cuts a call nobody
    reads); an error the call's responses end in is raised to the reader. `cancel()` stops
    the pump, which closes the responses: the forwarded call is cancelled and the router
    releases everything it held for the call."""

    def __init__(self, call: CallRequest, responses: AsyncIterator[pb.GenerateResponse],
                 clock: Callable[[], float]) -> None:
        self.call_id = call.call_id
        self.done = False
        self._responses = responses
        self._items: asyncio.Queue[StreamItem | Exception] = asyncio.Queue(MAX_UNREAD_ITEMS)
        self._task = asyncio.ensure_future(self._pump(_Completion(call, clock)))
        # A task cancelled before it ran never entered _pump: close the responses anyway.
        self._task.add_done_callback(lambda _: asyncio.ensure_future(responses.aclose()))

    async def _pump(self, completion: _Completion) -> None:
        try:
            async for response in self._responses:
                await self._items.put(completion.item(response))
        except Exception as exc:
            await self._items.put(exc)
        finally:
            await self._responses.aclose()

    def __aiter__(self) -> RoutedItems:
        return self

    async def __anext__(self) -> StreamItem:
        if self.done:
            raise StopAsyncIteration
        item = await self._items.get()
        if isinstance(item, Exception):
            self.done = True
            raise item
        self.done = isinstance(item, StreamFinal)
        return item

    def cancel(self) -> None:
        """Abort the call unless its final item was already read (idempotent)."""
        if self.done:
            return
        self.done = True
        self._task.cancel()


class _Completion:
    """What a call's messages add up to: deltas as they come, then its CompletionOutput
    (its prompt logprobs from the first delta)."""

    def __init__(self, call: CallRequest, clock: Callable[[], float]) -> None:
        self.call = call
        self.clock = clock
        self.arrival = clock()
        self.first_token: float | None = None
        self.token_ids: list[int] = []
        self.logprobs: list[TokenLogprob] = []
        self.prompt_logprobs: list[TokenLogprob | None] | None = None  # from the first delta

    def item(self, response: pb.GenerateResponse) -> StreamItem:
        if response.WhichOneof("kind") == "delta":
            delta = response.delta
            logprobs = convert.logprobs_of(delta.logprobs)
            if delta.token_ids and self.first_token is None:
                self.first_token = self.clock()
            self.token_ids.extend(delta.token_ids)
            self.logprobs.extend(logprobs)
            prompt_logprobs = None
            if self.call.params.prompt_logprobs is not None and self.prompt_logprobs is None:
                prompt_logprobs = self.prompt_logprobs = [
                    None, *convert.logprobs_of(delta.prompt_logprobs)]
            return StreamDelta(list(delta.token_ids), delta.text,
                               logprobs if self.call.params.logprobs is not None else None,
                               prompt_logprobs)
        final = response.final
        return StreamFinal(CompletionOutput(
            call_id=self.call.call_id, prompt_token_ids=self.call.prompt,
            token_ids=self.token_ids, text=final.text, finish_reason=final.finish_reason,
            num_cached_tokens=final.usage.cached_tokens, num_preemptions=0,
            queue_seconds=final.usage.queue_seconds,
            service_seconds=final.usage.service_seconds, arrival_time=self.arrival,
            first_token_time=self.first_token, finish_time=self.clock(),
            logprobs=self.logprobs if self.call.params.logprobs is not None else None,
            prompt_logprobs=self.prompt_logprobs))


__all__ = ["RouterBackend", "RoutedItems"]
