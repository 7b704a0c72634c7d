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
"""

from __future__ import annotations

import asyncio
import logging
from typing import AsyncIterator

import grpc

from scheduler.placement.base import PlacementRequest
from server import agentix_pb2 as pb
from server.router.core import RoutedCall, Router
from server.router.prompts import PromptShape
from server.wire import SHUTDOWN

log = logging.getLogger(__name__)


class _Retry(Exception):
    """The attempt failed before anything reached the client: try another replica."""


class LostMidStream(Exception):
    """The call's replica was lost after part of the stream was relayed."""


def _retryable(exc: grpc.aio.AioRpcError, lost: bool) -> bool:
    return lost or exc.code() == grpc.StatusCode.UNAVAILABLE


async def relay(router: Router, forward: pb.GenerateRequest, metadata: list[tuple[str, str]],
                shape: PromptShape, placement: PlacementRequest, routed: RoutedCall,
                program_id: str | None, state: dict) -> AsyncIterator[pb.GenerateResponse]:
    """Yield the call's responses from whichever replica serves it (see the module
    docstring). `state["streamed"]` tells the caller whether anything was relayed,
    `state["final"]` the final message once seen, `state["replica"]` the last replica.
    Raises NoReplicaError (core), LostMidStream, or the replica's AioRpcError to relay."""
    excluded: set[int] = set()
    restarted: set[int] = set()  # replicas the program was started on again (NOT_FOUND)
    while True:
        if routed.aborted:
            return
        routed_program = (router.programs.routed.get(program_id)
                          if program_id is not None else None)
        barred = routed_program.barred if routed_program is not None else set()
        replica = router.place(placement, excluded | barred)
        state["replica"] = replica.index
        if program_id is not None:
            router.programs.placed(program_id, replica.index)
            try:
                await router.ensure_started(program_id, replica, metadata)
            except grpc.aio.AioRpcError as exc:
                if not (_retryable(exc, False)
                        or exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED):
                    raise
                log.info("replica %d refused StartProgram (%s): retrying elsewhere",
                         replica.index, exc.code().name)
                excluded.add(replica.index)
                replica.suspect()
                router.retried += 1
                continue
        attempt = replica.forward(forward, metadata, shape.num_tokens)
        routed.attempt = attempt
        try:
            async for response in attempt.call:
                is_final = response.WhichOneof("kind") == "final"
                if is_final and response.final.finish_reason == SHUTDOWN \
                        and not state["streamed"]:
                    raise _Retry()
                if is_final:
                    state["final"] = response.final
                    router.observe(placement, replica.index, response.final.usage)
                state["streamed"] = routed.streamed = True
                yield response
            if state["final"] is not None:
                return
            if state["streamed"]:  # the stream ended without its final message
                raise LostMidStream(replica)
            excluded.add(replica.index)
            router.retried += 1
        except _Retry:
            excluded.add(replica.index)
            router.retried += 1
        except asyncio.CancelledError:
            # grpc.aio raises this for a call cancelled here: by the health check when the
            # replica was lost (retry or fail it), or by our own task's cancellation.
            task = asyncio.current_task()
            if not attempt.lost or (task is not None and task.cancelling()):
                raise
            if state["streamed"]:
                raise LostMidStream(replica) from None
            excluded.add(replica.index)
            router.retried += 1
        except grpc.aio.AioRpcError as exc:
            if state["final"] is not None:
                raise  # after the final message (a drain's UNAVAILABLE): relay it
            if _forgotten(router, exc, program_id, replica.index, restarted, state):
                continue
            if not _retryable(exc, attempt.lost):
                raise
            if state["streamed"]:
                replica.suspect()
                raise LostMidStream(replica) from exc
            log.info("call %s: replica %d failed before streaming (%s): retrying",
                     routed.call_id, replica.index, exc.code().name)
            excluded.add(replica.index)
            replica.suspect()
            router.retried += 1
        finally:
            routed.attempt = None
            replica.done(attempt)


def _forgotten(router: Router, exc: grpc.aio.AioRpcError, program_id: str | None,
               replica: int, restarted: set[int], state: dict) -> bool:
    """Whether the replica lost track of a program the router still has (NOT_FOUND before
    anything streamed): the first time, it is to be started there again; the second, the
    replica is barred for the program. Either way the call is placed again."""
    if exc.code() != grpc.StatusCode.NOT_FOUND or program_id is None or state["streamed"]:
        return False
    routed = router.programs.routed.get(program_id)
    if routed is None:
        return False
    routed.started_on.discard(replica)
    if replica in restarted:
        routed.barred.add(replica)
    restarted.add(replica)
    return True


__all__ = ["LostMidStream", "relay"]
