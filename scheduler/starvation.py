"""Anti-starvation: promote a waiting call to the top queue when
`(W_program + W_call) / (T_program + T_call) >= beta`.

While a call waits, only its own W grows (by the clock), so the moment its ratio will cross
beta is known; the scheduler watches that moment for each waiting call below the top level
(a `DeadlineWatch`: one live deadline per call, forgotten when the call starts running or
finishes) and each round pops only the due ones, re-checking the exact ratio (a program's W
and T may have moved since) before promoting.
"""

from __future__ import annotations

from scheduler.process_table import CallRecord, ProgramRecord


def starvation_ratio(program: ProgramRecord, call: CallRecord, now: float) -> float:
    waited = call.wait + (now - call.waiting_since if call.waiting_since is not None else 0.0)
    served = program.service + call.service
    w = program.wait + waited
    return float("inf") if served <= 0 else w / served


def crossing_time(program: ProgramRecord, call: CallRecord, beta: float) -> float:
    """When a call waiting since `call.waiting_since` reaches the ratio beta."""
    since = call.waiting_since if call.waiting_since is not None else 0.0
    gap = beta * (program.service + call.service) - (program.wait + call.wait)
    return since + max(0.0, gap)
