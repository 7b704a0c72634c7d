"""A routed call's life is a typed state machine: only its moves are allowed, none leads
back to placing once part of it reached the client, and an aborted call makes no move
towards a replica."""

from __future__ import annotations

import pytest

from server.router.core import PHASE_MOVES, CallAborted, CallPhase, RoutedCall


def test_a_call_retried_then_streamed_to_its_end():
    call = RoutedCall("c")
    for phase in (CallPhase.STARTING, CallPhase.PLACING, CallPhase.FORWARDED,
                  CallPhase.PLACING, CallPhase.STARTING, CallPhase.FORWARDED,
                  CallPhase.STREAMING, CallPhase.STREAMING, CallPhase.DONE):
        call.move(phase)
    assert call.phase is CallPhase.DONE and call.streamed


@pytest.mark.parametrize("path", [
    (CallPhase.STREAMING,),                                            # never forwarded
    (CallPhase.FORWARDED, CallPhase.STREAMING, CallPhase.PLACING),     # retried after a delta
    (CallPhase.FORWARDED, CallPhase.DONE, CallPhase.STREAMING),        # after its final
    (CallPhase.STARTING, CallPhase.STREAMING),                         # before it was sent
])
def test_a_move_outside_the_machine_is_a_bug(path):
    call = RoutedCall("c")
    for phase in path[:-1]:
        call.move(phase)
    with pytest.raises(RuntimeError, match="is not a call's move"):
        call.move(path[-1])


def test_once_streamed_a_call_never_goes_back_to_placing():
    assert all(CallPhase.PLACING not in PHASE_MOVES[p]
               for p in (CallPhase.STREAMING, CallPhase.DONE))


@pytest.mark.parametrize("path", [
    (CallPhase.PLACING,),                                              # before it was placed
    (CallPhase.STARTING, CallPhase.FORWARDED),                         # its program starting
    (CallPhase.FORWARDED, CallPhase.PLACING),                          # its retry
])
def test_an_aborted_call_ends_aborted_at_its_next_move_towards_a_replica(path):
    call = RoutedCall("c")
    for phase in path[:-1]:
        call.move(phase)
    assert call.abort() and not call.abort()  # a second Abort finds it aborted
    with pytest.raises(CallAborted):
        call.move(path[-1])
    assert call.phase is CallPhase.ABORTED and not call.streamed and not call.abort()


def test_an_aborted_call_on_its_replica_streams_its_replica_final():
    call = RoutedCall("c")
    call.move(CallPhase.FORWARDED)
    call.move(CallPhase.STREAMING)
    assert call.abort()
    call.move(CallPhase.STREAMING)
    call.move(CallPhase.DONE)
    assert call.phase is CallPhase.DONE


def test_a_finished_call_cannot_be_aborted():
    call = RoutedCall("c")
    for phase in (CallPhase.FORWARDED, CallPhase.DONE):
        call.move(phase)
    assert not call.abort() and not call.aborted
