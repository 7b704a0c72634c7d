"""Mask cost per decode step for the grammar-cost study (`bench.studies.grammar.cost`): one
library's batch of matchers stepping through valid token sequences, timed so that several libraries
can be stepped in turn inside one process (each step of each library sees the same machine load).

A step fills the [batch, ceil(V / 32)] int32 bitmask of all matchers row by row on this
thread, and again with the library's batched fill where it has one (the two orders
alternate), checks that both agree and that each row allows its next token, then advances
every matcher by that token; a matcher past its last token (EOS) is reset and starts over
(untimed). Times are wall clock and CPU time: this thread's (`time.thread_time`) for the
row-by-row fill, the process's (`time.process_time`, all threads) for the batched one. CPU
time does not grow when other jobs take the cores, so it is the cost figure on a shared
machine; wall time shows what a step waits.
"""

from __future__ import annotations

import math
import statistics
import time
from typing import Any


def start_matchers(backend: Any, compiled: Any, sequences: list[list[int]]) -> tuple[list, list[int]]:
    """One matcher per sequence, matcher i advanced `i mod (len - 1)` tokens (untimed), so the
    batch is not in lockstep. Raises RuntimeError if a token is rejected."""
    matchers, positions = [], []
    for i, seq in enumerate(sequences):
        matcher = backend.new_matcher(compiled)
        offset = i % (len(seq) - 1)
        for token in seq[:offset]:
            if not backend.advance(matcher, token):
                raise RuntimeError(f"matcher {i}: token {token} rejected while starting")
        matchers.append(matcher)
        positions.append(offset)
    return matchers, positions


class MaskRun:
    """One library's matchers over `sequences` (token ids ending in EOS); `step()` runs and
    times one decode step, `summary(warmup)` gives the statistics."""

    def __init__(self, backend: Any, compiled: Any, sequences: list[list[int]], size: int) -> None:
        import torch

        self.backend, self.sequences = backend, sequences
        self.matchers, self.positions = start_matchers(backend, compiled, sequences)
        shape = (len(sequences), (size + 31) // 32)
        self.row_mask = torch.full(shape, -1, dtype=torch.int32)
        self.batch_mask = torch.full(shape, -1, dtype=torch.int32)
        self.times: dict[str, list[tuple[float, float]]] = {"fill_row": [], "fill_batch": [], "advance": []}
        self.not_allowed = self.rejected = self.disagreements = self.restarts = 0

    def step(self, row_first: bool) -> None:
        """One decode step: both fills (in the given order), the checks, the advance."""
        import torch

        from bench.studies.grammar.backends import allowed

        for which in (("row", "batch") if row_first else ("batch", "row")):
            if which == "row":
                self.times["fill_row"].append(_timed(self._fill_rows, time.thread_time))
            elif self.backend.batch_fill is not None:
                self.times["fill_batch"].append(
                    _timed(lambda: self.backend.batch_fill(self.matchers, self.batch_mask), time.process_time))
        if self.backend.batch_fill is not None and not torch.equal(self.row_mask, self.batch_mask):
            self.disagreements += 1
        self.not_allowed += sum(not allowed(self.row_mask, i, self.sequences[i][p])
                                for i, p in enumerate(self.positions))
        results: list[bool] = []
        self.times["advance"].append(_timed(lambda: results.extend(self._advance_all()), time.thread_time))
        self.rejected += results.count(False)
        for i, matcher in enumerate(self.matchers):
            self.positions[i] += 1
            if self.positions[i] == len(self.sequences[i]):
                self.backend.reset(matcher)
                self.positions[i] = 0
                self.restarts += 1

    def _fill_rows(self) -> None:
        for row, matcher in enumerate(self.matchers):
            self.backend.fill_row(matcher, self.row_mask, row)

    def _advance_all(self) -> list[bool]:
        return [self.backend.advance(m, self.sequences[i][self.positions[i]]) for i, m in enumerate(self.matchers)]

    def summary(self, warmup: int) -> dict:
        """Per timed part: warm-up mean, steady median / p90 (ms per step, wall), us per token
        (wall median / batch) and CPU us per token (CPU median / batch); plus the checks."""
        batch = len(self.matchers)
        return {
            **{name: step_stats(times, warmup, batch) if times else None for name, times in self.times.items()},
            "mean_tokens_per_instance": statistics.mean(len(s) for s in self.sequences),
            "next_token_not_allowed": self.not_allowed, "advance_rejected": self.rejected,
            "row_vs_batch_disagreements": self.disagreements, "restarts": self.restarts,
        }


def _timed(fn: Any, cpu_clock: Any) -> tuple[float, float]:
    """(wall seconds, CPU seconds on `cpu_clock`) of one call of `fn`."""
    wall, cpu = time.perf_counter(), cpu_clock()
    fn()
    return time.perf_counter() - wall, cpu_clock() - cpu


def step_stats(times: list[tuple[float, float]], warmup: int, batch: int) -> dict:
    """Statistics of (wall, cpu) step times; the first `warmup` steps only in their mean."""
    walls = sorted(w for w, _ in times[warmup:])
    cpus = sorted(c for _, c in times[warmup:])
    median = statistics.median(walls)
    return {
        "warmup_mean_ms": 1e3 * statistics.mean(w for w, _ in times[:warmup]),
        "median_ms": 1e3 * median,
        "p90_ms": 1e3 * walls[max(0, math.ceil(0.9 * len(walls)) - 1)],
        "us_per_token": 1e6 * median / batch,
        "cpu_us_per_token": 1e6 * statistics.median(cpus) / batch,
    }
