"""The quiet-windows study classifies each step of a run exactly (block size 16, multistep 4)."""

from bench.sim.trace import Trace, TraceCall, TraceProgram
from bench.studies.quiet_windows import count_windows


def test_two_calls_give_the_windows_counted_by_hand():
    # c0: a 10-token prompt, 40 tokens out: its prefill step (arrival, not a decode), then 39
    # decodes starting at 10..48, three of them at a block's first token (16, 32, 48), in
    # rounds of 4, 4, ..., 3. c1 follows it at once: 48 of its 60 prompt tokens are c0's
    # cached blocks; its prefill step (arrival, finish before it, not a decode), one decode.
    trace = Trace((TraceProgram("p", 0.0, (
        TraceCall("c0", 10, 40), TraceCall("c1", 60, 2, parents=("c0",))), "t"),))
    counted = count_windows(trace, "optimized")
    assert counted == {
        "steps": 42, "windows": 5, "steps_per_window": 8.4, "windows_without_blocks": 2,
        "steps_per_window_without_blocks": 21.0, "calls": 2, "steps_new_round": 13,
        "steps_with_arrival": 2, "steps_with_finish": 1, "steps_with_level_move": 0,
        "steps_with_not_decode": 2, "steps_with_block_boundary": 3}


def test_a_level_move_starts_a_window():
    # Under atlas a call whose program's service passes its level's quantum moves down:
    # the step after such a move starts a window of its own.
    trace = Trace((TraceProgram("p", 0.0, (TraceCall("c0", 10, 400),), "t"),))
    counted = count_windows(trace, "atlas")
    assert counted["steps"] == 400
    assert counted["steps_with_level_move"] > 0
    assert counted["windows_without_blocks"] == 1 + counted["steps_with_level_move"]
