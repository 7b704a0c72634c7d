"""Running a piece of start-up work in a thread of its own that ends with it.

torch's OpenMP runtime (GNU libgomp in the CPU builds) keeps one team of worker threads for
each thread that starts parallel work, for as long as that thread lives. A server that loads
its model in the main thread and steps it in the engine loop's thread holds two teams; with
more team threads than cores, libgomp stops spinning between parallel regions, and every
region puts its workers to sleep and wakes them. On the 2-core machine of the vs_vllm study
that cost about 0.8x the tokens/s (390,000 voluntary context switches in one 64-request
run, against a few hundred with one team). Loading in a passing thread takes its team away
when it ends, so only the engine loop's remains.
"""

from __future__ import annotations

import threading
from typing import Callable, TypeVar

T = TypeVar("T")


def in_passing_thread(work: Callable[[], T], name: str = "agentix-load") -> T:
    """`work()`, run in a new thread (a daemon, named `name`) that ends before this returns;
    its result, or what it raised, re-raised here with its traceback."""
    results: list[T] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            results.append(work())
        except BaseException as exc:  # handed to the caller, whatever it is
            errors.append(exc)

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    thread.join()
    if errors:
        raise errors[0]
    return results[0]
