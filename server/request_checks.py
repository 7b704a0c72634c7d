"""Checks of request fields that the engine's servicer (server/service.py) and the router's
(server/router/service.py) make alike: a `program_priority` only the trusted router may
send, `program_class` and `thread_id` checked like every id, and the top-programs bound of
EngineStats. Torch-free: the router imports no engine."""

from __future__ import annotations

import math

import grpc

from scheduler.ids import check_id
from server import agentix_pb2 as pb
from server.auth import RouterTrust

MAX_TOP_PROGRAMS = 100


async def checked_priority(request: pb.GenerateRequest, context: grpc.aio.ServicerContext,
                           trust: RouterTrust | None) -> float | None:
    """The request's `program_priority`, if set: PERMISSION_DENIED unless the trusted router
    sent it (`trust`; None: nobody may), INVALID_ARGUMENT unless a finite number >= 0."""
    if not request.HasField("program_priority"):
        return None
    if trust is None or not trust.trusted(context.invocation_metadata()):
        await context.abort(grpc.StatusCode.PERMISSION_DENIED,
                            "program_priority: only a trusted router may set it")
    value = request.program_priority
    if not (math.isfinite(value) and value >= 0):
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                            f"program_priority: must be a finite number >= 0, got {value!r}")
    return value


def check_thread(thread_id: str) -> str:
    """A client's thread id, checked like every id (ValueError naming thread_id)."""
    check_id("thread_id", thread_id)
    return thread_id


def check_program_class(program_class: str) -> str | None:
    """A StartProgram's `program_class`: None when empty (unset in proto3), else checked like
    every id (ValueError naming program_class)."""
    if not program_class:
        return None
    check_id("program_class", program_class)
    return program_class


def top_programs(request: pb.EngineStatsRequest) -> int:
    """How many programs an EngineStats request lists (ValueError outside 0..100)."""
    if not 0 <= request.top_programs <= MAX_TOP_PROGRAMS:
        raise ValueError(f"top_programs: must be in [0, {MAX_TOP_PROGRAMS}], "
                         f"got {request.top_programs}")
    return request.top_programs
