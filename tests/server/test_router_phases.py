"""A routed call's life is a typed state machine: only its moves are allowed, and none leads
back to placing once part of it reached the client."""

from __future__ import annotations

import pytest

from server.router.core import PHASE_MOVES, CallPhase, RoutedCall


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
