"""The router's Generate: place the call, forward it with the program's priority value,
relay the replica's stream unchanged, fold the final usage into the program.

Retry rules. A call is retried on another replica, with the same call id, transparently,
while nothing of it has reached the client: when its replica is unreachable or lost
(UNAVAILABLE, or cut by the health check), does not answer the program's StartProgram in
time (DEADLINE_EXCEEDED: frozen or hung; if it did start the program, its TTL ends it
there), refuses it while draining (UNAVAILABLE), or cuts it for its shutdown (a final
"shutdown" message before any delta). The failed replica
is left out for the rest of the call and checked at once; when no healthy replica is left
the call fails with UNAVAILABLE. A replica that answers NOT_FOUND for a program the router
still has (it restarted between two health checks, or its TTL expired the program there
while the program's other calls went elsewhere) gets the program started again and the
call once more; if it still does not know the program (an expired id stays taken there),
it is barred for the program's calls from then on (they, and its pin, go elsewhere). Once a
delta was relayed the call is not retried: losing
its replica ends the stream with UNAVAILABLE, saying the replica was lost mid-stream (the
client library's `retries` option re-sends it with the same id). Any other error of the
replica (INVALID_ARGUMENT, NOT_FOUND, RESOURCE_EXHAUSTED, ...) is relayed as it is.
A client that cancels its stream cancels the forwarded call, which the replica aborts.

Abort (service.py) marks the call; the call's next move towards a replica (placing it,
starting its program, forwarding it) ends it ABORTED instead (core.RoutedCall.move), so an
Abort between any two awaits is never lost; a call already forwarded is aborted on its
replica, or its forwarded call is cut when the replica does not know it yet.
"""

from __future__ import annotations

import asyncio
import logging
from typing import AsyncIterator

import grpc

from scheduler.placement.base import PlacementRequest
from server import agentix_pb2 as pb
from server.router.core import CallAborted, CallPhase, RoutedCall, Router
from server.router.replica import Replica
from server.router.prompts import PromptShape
from server.wire import SHUTDOWN

log = logging.getLogger(__name__)


class _Retry(Exception):
    """The attempt failed before anything reached the client: try another replica, or with
    `forgotten`, the replica answered NOT_FOUND for a program the router still has (start
    it there again, then bar the replica)."""

    def __init__(self, forgotten: bool = False) -> None:
        super().__init__()
        self.forgotten = forgotten


class LostMidStream(Exception):
    """The call's replica was lost after part of the stream was relayed."""


def _retryable(exc: grpc.aio.AioRpcError, lost: bool) -> bool:
    return lost or exc.code() == grpc.StatusCode.UNAVAILABLE


async def relay(router: Router, forward: pb.GenerateRequest, metadata: list[tuple[str, str]],
                shape: PromptShape, placement: PlacementRequest, routed: RoutedCall,
                program_id: str | None) -> AsyncIterator[pb.GenerateResponse]:
    """Yield the call's responses from whichever replica serves it (see the module
    docstring), moving `routed` through its phases (core.CallPhase): PLACING -> (STARTING
    ->) FORWARDED -> STREAMING -> DONE, back to PLACING after a retryable failure before
    anything was relayed. A call the client aborted ends ABORTED, with no final message
    yielded (the caller sends one), when no replica had it or its forwarded call was cut
    for the Abort. Raises NoReplicaError (core), LostMidStream, or the replica's
    AioRpcError to relay."""
    excluded: set[int] = set()
    restarted: set[int] = set()  # replicas the program was started on again (NOT_FOUND)
    try:
        while True:
            routed.move(CallPhase.PLACING)  # first, or again after a _Retry
            routed_program = (router.programs.routed.get(program_id)
                              if program_id is not None else None)
            barred = routed_program.barred if routed_program is not None else set()
            replica = router.place(placement, excluded | barred)
            routed.replica = replica.index
            try:
                if program_id is not None:
                    await _start_program(router, routed, program_id, replica, metadata)
                routed.move(CallPhase.FORWARDED)
                async for response in _attempt(router, forward, metadata, shape, placement,
                                               routed, replica, program_id):
                    yield response
                return
            except _Retry as retry:
                if retry.forgotten:
                    _forgotten(router, program_id, replica.index, restarted)
                else:
                    excluded.add(replica.index)
                    router.retried += 1
    except CallAborted:  # a move found the call aborted: it is ABORTED
        return


def _completed(routed: RoutedCall) -> bool:
    """Whether `routed` got its final message, and not one cutting it for a shutdown."""
    return routed.final is not None and routed.final.finish_reason != SHUTDOWN


async def _start_program(router: Router, routed: RoutedCall, program_id: str,
                         replica: Replica, metadata: list[tuple[str, str]]) -> None:
    """STARTING: the program started on `replica` (once); _Retry when the replica is
    unreachable or does not answer in time."""
    routed.move(CallPhase.STARTING)
    router.programs.placed(program_id, replica.index)
    try:
        await router.ensure_started(program_id, replica, metadata)
    except grpc.aio.AioRpcError as exc:
        if not (_retryable(exc, False) or exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED):
            raise
        log.info("replica %d refused StartProgram (%s): retrying elsewhere", replica.index,
                 exc.code().name)
        replica.suspect()
        raise _Retry() from exc


async def _attempt(router: Router, forward: pb.GenerateRequest,
                   metadata: list[tuple[str, str]], shape: PromptShape,
                   placement: PlacementRequest, routed: RoutedCall, replica: Replica,
                   program_id: str | None) -> AsyncIterator[pb.GenerateResponse]:
    """One forwarded attempt, FORWARDED -> STREAMING -> DONE; _Retry when it failed before
    anything was relayed (the caller places it again), LostMidStream when its replica was
    lost after that, the replica's own error otherwise. After a final message other than
    "shutdown" the call is complete: an error or a loss that follows (its replica killed before
    the stream closed) ends it as it is, never as a failure the client would re-send."""
    attempt = replica.forward(forward, metadata, shape.num_tokens)
    routed.attempt = attempt
    try:
        async for response in attempt.call:
            is_final = response.WhichOneof("kind") == "final"
            if is_final and response.final.finish_reason == SHUTDOWN and not routed.streamed:
                raise _Retry()  # cut for the replica's shutdown before any delta
            if is_final:
                routed.final = response.final
                router.observe(placement, replica.index, response.final.usage)
            routed.move(CallPhase.DONE if is_final else CallPhase.STREAMING)
            yield response
        if routed.final is None:  # the stream ended without its final message
            if routed.streamed:
                raise LostMidStream(replica)
            raise _Retry()
    except asyncio.CancelledError:
        # grpc.aio raises this for a call cancelled here: by the client's Abort when its
        # replica could not abort it (service.py), by the health check when the replica
        # was lost (retry or fail it), or by our own task's cancellation.
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise
        if routed.aborted:
            routed.move(CallPhase.ABORTED)
            return
        if _completed(routed):
            return  # the replica was lost only after the call's final message
        if not attempt.lost:
            raise
        if routed.streamed:
            raise LostMidStream(replica) from None
        raise _Retry() from None
    except grpc.aio.AioRpcError as exc:
        if _completed(routed):
            # An error after the final message (its replica killed before the stream
            # closed) must not make the client re-send a call it has whole.
            return
        if routed.final is not None:
            raise  # cut by the replica's drain: relay its UNAVAILABLE (the client re-sends)
        if exc.code() == grpc.StatusCode.NOT_FOUND and not routed.streamed \
                and program_id is not None and program_id in router.programs.routed:
            raise _Retry(forgotten=True) from exc
        if not _retryable(exc, attempt.lost):
            raise
        replica.suspect()
        if routed.streamed:
            raise LostMidStream(replica) from exc
        log.info("call %s: replica %d failed before streaming (%s): retrying",
                 routed.call_id, replica.index, exc.code().name)
        raise _Retry() from exc
    finally:
        routed.attempt = None
        replica.done(attempt)


def _forgotten(router: Router, program_id: str, replica: int, restarted: set[int]) -> None:
    """The replica lost track of a program the router still has (NOT_FOUND before anything
    streamed): the first time, the program is to be started there again; the second, the
    replica is barred for the program's calls."""
    routed = router.programs.routed[program_id]
    routed.started_on.discard(replica)
    if replica in restarted:
        routed.barred.add(replica)
    restarted.add(replica)


__all__ = ["LostMidStream", "relay"]
