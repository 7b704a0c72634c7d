"""What the OpenAI door (server/openai_http.py) runs its calls and programs on: one engine
(`EngineBackend`, over its EngineLoop) or a router's replicas
(`server.router.http_backend.RouterBackend`). The door's code is the same for both.

Ids are the engine's (already in the caller's namespace, server/namespace.py); `headers` are
the HTTP request's, which a router forwards (its authorization) to the replicas. Request
errors are raised as the engine or the server names them (`server.errors.status_of` maps
them), and a call's stream may end in one of them too.
"""

from __future__ import annotations

from typing import AsyncIterator, Iterable, Protocol

from engine import EngineStats
from server import agentix_pb2 as pb
from server.call_stream import CallStream, StreamItem
from server.calls import CallRequest, adder
from server.engine_loop import EngineLoop
from server.namespace import Namespace
from server.wire import program_info

Headers = Iterable[tuple[str, str]]


class CallItems(Protocol):
    """One submitted call's items (`server.call_stream`: deltas, then one final item);
    `cancel()` aborts the call unless it has finished (idempotent, from the door's loop)."""

    call_id: str | None

    def __aiter__(self) -> AsyncIterator[StreamItem]: ...

    def cancel(self) -> None: ...


class DoorBackend(Protocol):
    def unavailable(self) -> str | None:
        """Why the door answers 503 on /health now (None: it serves)."""

    async def submit(self, ns: Namespace, call: CallRequest, headers: Headers) -> CallItems:
        """Validate and submit one call of the caller `ns` (its request error, and nothing
        submitted)."""

    async def start_program(self, ns: Namespace, program_id: str,
                            program_class: str | None) -> None:
        """Start a program of the caller's tenant (a request's own, for its n calls)."""

    async def get_program(self, ns: Namespace, program_id: str) -> pb.ProgramInfo:
        """The program's record, ids as the caller knows them."""

    async def end_program(self, ns: Namespace, program_id: str,
                          headers: Headers) -> pb.ProgramInfo:
        """End the program (its calls are aborted); its final record."""


class EngineBackend:
    """The door on one engine: every operation is a command of its EngineLoop."""

    def __init__(self, engine_loop: EngineLoop) -> None:
        self.loop = engine_loop

    def unavailable(self) -> str | None:
        if self.loop.draining:
            return "the server is shutting down"
        return self.loop.unavailable()

    async def submit(self, ns: Namespace, call: CallRequest, headers: Headers
                     ) -> CallStream:
        return await self.loop.submit(adder(call))

    async def start_program(self, ns: Namespace, program_id: str,
                            program_class: str | None) -> None:
        await self.loop.run(lambda engine: engine.start_program(
            program_id, ns.tenant, program_class=program_class))

    async def get_program(self, ns: Namespace, program_id: str) -> pb.ProgramInfo:
        return await self.loop.run(
            lambda engine: program_info(engine.get_program(program_id), ns.outer))

    async def end_program(self, ns: Namespace, program_id: str,
                          headers: Headers) -> pb.ProgramInfo:
        # Ending a recently ended program again is harmless: its final record.
        return await self.loop.run(
            lambda engine: program_info(engine.end_program(program_id), ns.outer))

    async def stats(self) -> EngineStats:
        """The engine's statistics (for /metrics)."""
        return await self.loop.run(lambda engine: engine.stats())
