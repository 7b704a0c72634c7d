"""Independent simulations, one after another or several at once.

A study plans its runs in order: each is either a result it already has, or a job (a
module-level function and its picklable arguments). `run_all` runs the jobs here one by one
(`jobs=1`), or `jobs` at a time, each in a worker process of its own (spawned, so a worker
shares nothing with the study's process). The simulator is deterministic, so the results are
the same whatever `jobs`; the returned list is in planned order either way. `on_result` sees
each result as it is ready: in order with one job at a time, in the order they end with
several. The first job that fails cancels those not started and raises its error.
"""

from __future__ import annotations

import argparse
import multiprocessing
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from typing import Any, Callable, Iterable, TypeVar

MAX_JOBS = 64
R = TypeVar("R")
Job = tuple[Callable[..., Any], tuple[Any, ...]]


def check_jobs(jobs: int) -> int:
    """`jobs` if in [1, MAX_JOBS], else ValueError naming it."""
    if not 1 <= jobs <= MAX_JOBS:
        raise ValueError(f"jobs: must be in [1, {MAX_JOBS}], got {jobs}")
    return jobs


def parse_jobs(text: str) -> int:
    """A `--jobs` flag's value, as argparse takes a `type`: `check_jobs` of its int."""
    try:
        return check_jobs(int(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_jobs_argument(parser: argparse.ArgumentParser, what: str) -> None:
    """`--jobs N` on `parser` (`parse_jobs`, default 1): how many `what` (a plural, e.g.
    "runs") simulate at once, each in its own process."""
    parser.add_argument("--jobs", type=parse_jobs, default=1,
                        help=f"{what} at once, each in its own process (1-{MAX_JOBS}; the "
                             "results are the same whatever the number)")


def run_all(planned: Iterable[tuple[R | None, Job | None]], jobs: int = 1,
            on_result: Callable[[R], None] | None = None) -> list[R]:
    """The result of each planned (result, job): the result when it is not None, else what
    `fn(*args)` of its job returns (see the module docstring)."""
    check_jobs(jobs)
    report = on_result or (lambda result: None)
    if jobs == 1:
        results = []
        for done, job in planned:
            results.append(_call(job) if done is None else done)
            report(results[-1])
        return results
    pool = ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn"))
    try:
        futures = [pool.submit(*_unpacked(job)) if done is None else _done(done)
                   for done, job in planned]
        for future in as_completed(futures):
            report(future.result())
    except BaseException:
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    return [future.result() for future in futures]


def _unpacked(job: Job | None) -> tuple[Any, ...]:
    if job is None:
        raise ValueError("a planned run with neither a result nor a job")
    fn, args = job
    return (fn, *args)


def _call(job: Job | None) -> Any:
    fn, *args = _unpacked(job)
    return fn(*args)


def _done(result: R) -> Future[R]:
    """A future already holding `result`."""
    future: Future[R] = Future()
    future.set_result(result)
    return future
