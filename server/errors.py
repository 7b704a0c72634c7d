"""Errors the server raises for requests the engine itself would accept, and the one place
that maps every request error to a gRPC status code."""

from __future__ import annotations

import logging
from typing import NoReturn

import grpc

from scheduler.executor_errors import EngineBrokenError
from scheduler.ids import DuplicateCallError
from scheduler.process_table import ProgramExistsError, ProgramLimitError, UnknownProgramError

log = logging.getLogger(__name__)


class ServerError(Exception):
    """Base of the server's own request errors; `code` is the status the client gets."""

    code = grpc.StatusCode.INTERNAL


class DrainingError(ServerError):
    """The server is shutting down and takes no new programs or calls."""

    code = grpc.StatusCode.UNAVAILABLE


class QueueFullError(ServerError):
    """The engine's waiting queue is at the configured bound (`max_waiting`)."""

    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class UnreadStreamError(ServerError):
    """The client stopped reading its stream: more than the bound of its items waited unread,
    so the call was aborted and its stream cut (see `server.call_stream`)."""

    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class PermissionDeniedError(ServerError):
    """The caller's tenant does not own the program or call it names."""

    code = grpc.StatusCode.PERMISSION_DENIED


class AlreadyExistsError(ServerError):
    """A proposed id (program or call) is taken."""

    code = grpc.StatusCode.ALREADY_EXISTS


class RelayedError(ServerError):
    """An error a replica answered, or the router's own refusal, relayed with its status."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def status_of(exc: BaseException) -> grpc.StatusCode | None:
    """The status code for a request error, or None for an unexpected (internal) error.

    Engine errors: unknown or ended program -> NOT_FOUND, a taken call or program id ->
    ALREADY_EXISTS, a program past `max_programs` or `max_programs_per_tenant` ->
    RESOURCE_EXHAUSTED, a broken engine (a tensor-parallel worker died) -> UNAVAILABLE (retry
    elsewhere), any other ValueError (the engine names the field first) -> INVALID_ARGUMENT.
    """
    if isinstance(exc, ServerError):
        return exc.code
    if isinstance(exc, EngineBrokenError):
        return grpc.StatusCode.UNAVAILABLE
    if isinstance(exc, ProgramLimitError):
        return grpc.StatusCode.RESOURCE_EXHAUSTED
    if isinstance(exc, UnknownProgramError):
        return grpc.StatusCode.NOT_FOUND
    if isinstance(exc, (DuplicateCallError, ProgramExistsError)):
        return grpc.StatusCode.ALREADY_EXISTS
    if isinstance(exc, ValueError):
        return grpc.StatusCode.INVALID_ARGUMENT
    return None


def message_of(exc: BaseException) -> str:
    """The client-facing message (UnknownProgramError's own str, not KeyError's repr)."""
    return str(exc) if str(exc) else type(exc).__name__


async def abort_for(context: grpc.aio.ServicerContext, exc: Exception) -> NoReturn:
    """End the RPC with `exc`'s status and message; an unexpected error is logged and becomes
    INTERNAL."""
    code = status_of(exc)
    if code is None:
        log.error("internal error", exc_info=exc)
        await context.abort(grpc.StatusCode.INTERNAL, f"internal error: {message_of(exc)}")
    await context.abort(code, message_of(exc))
