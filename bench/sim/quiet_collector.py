"""The cyclic garbage collector held off a simulation's loop.

A simulation allocates a few small objects per sampled token (chunks, sampled tokens, step
outputs) beside about a million long-lived ones (the trace, calls, records, block lists), and
almost none of them form reference cycles: at CPython's default thresholds the collector runs
thousands of times in a run and finds almost nothing (in `agentix bench sim --workload mixed
--policy atlas --programs 400 --rate 8`: 6,778 collections, about 4 s of a 30 s run, 317
objects found; inside `quiet_collector`, 4 collections). Objects freed by their reference
counts, nearly all of them, are freed at once either way; only cyclic garbage waits, and it
is still collected.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

# Allocations (net of frees) between collections of the young generation inside
# `quiet_collector` (CPython's default: 700).
YOUNG_THRESHOLD = 50_000


@contextlib.contextmanager
def quiet_collector() -> Iterator[None]:
    """Inside, the objects alive at entry are out of the collector's reach (`gc.freeze`) and
    the young generation is collected every `YOUNG_THRESHOLD` allocations; at exit the
    thresholds are restored and frozen objects go back to the collector (`gc.unfreeze`:
    nested uses unfreeze at the innermost exit). Changes no result: nothing the simulator
    computes depends on when memory is reclaimed."""
    thresholds = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, *thresholds[1:])
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()
