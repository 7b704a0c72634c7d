"""How long to keep a program's KV on the device across a tool call, learnt from the
times programs took to come back.

A sample is the gap after a program's last active call finished: (seconds, 1) when its next
call arrived then, (seconds, 0) when the program ended (or expired) instead. Samples are
kept per class (tenant, program_class) and overall (`ClassWindows`).

The rule (after Continuum, arXiv 2511.02230): keep the KV for the τ that maximises

    B(τ) = P(T <= τ) * value  -  price * E[min(T, τ)]

where T is the time to the program's next call (never, if it ends), so P(T <= τ) is the
share of samples that came back within τ and E[min(T, τ)] is how long the KV is expected
to be held; `value` is what eviction would cost when the call comes back (reloading its KV
from the host or recomputing it, the cheaper, for the call itself and for the calls whose
steps that reload slows) and `price` is what holding the KV costs per second (the waiting
calls its blocks would admit). Both are in call-seconds; `retention_value` and
`memory_price` compute them. The maximum is taken at an observed return time; τ = 0 (do
not retain) when no τ has B > 0. With no memory wanted (price 0) that is the longest
observed return: the KV is kept while any return is still likely.

The same samples give the prefetch lead: KV that was moved to the host comes back to the
device from the `PREFETCH_QUANTILE` of the return times, less the time the copy takes.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

import numpy as np

from scheduler.class_windows import ClassWindows

PREFETCH_QUANTILE = 0.1  # start bringing KV back once a tenth of the returns have happened


@dataclass(frozen=True)
class ReturnTimes:
    """P(T <= τ) and E[min(T, τ)] at each candidate τ (every distinct observed return
    time, ascending), from samples of (seconds, returned)."""

    taus: np.ndarray
    returned_by: np.ndarray  # P(T <= taus[i])
    held: np.ndarray  # E[min(T, taus[i])]

    @classmethod
    def build(cls, samples: np.ndarray) -> ReturnTimes:
        """From rows (seconds >= 0, returned in {0, 1}), any order."""
        order = np.argsort(samples[:, 0], kind="stable")
        seconds, returned = samples[order, 0], samples[order, 1] > 0
        n = seconds.size
        taus = np.unique(seconds[returned])
        count_upto = np.searchsorted(seconds, taus, side="right")  # samples <= tau
        returned_upto = np.cumsum(returned)[count_upto - 1] if taus.size else count_upto
        sums = np.concatenate([[0.0], np.cumsum(seconds)])
        held = (sums[count_upto] + taus * (n - count_upto)) / n
        return cls(taus, returned_upto / n, held)

    def best_retention(self, value: float, price: float) -> float:
        """The τ maximising P(T <= τ) * value - price * E[min(T, τ)]; 0 when none gains."""
        if not self.taus.size:
            return 0.0
        gain = self.returned_by * value - price * self.held
        best = int(np.argmax(gain))
        return float(self.taus[best]) if gain[best] > 0 else 0.0

    def return_quantile(self, q: float) -> float | None:
        """The time by which a share `q` of the programs that came back had come back."""
        if not self.taus.size:
            return None
        share = self.returned_by / self.returned_by[-1]
        first = int(np.searchsorted(share, q - 1e-9))  # shares are ratios: allow rounding
        return float(self.taus[min(first, self.taus.size - 1)])


def retention_value(reload_seconds: float, calls_slowed: int) -> float:
    """Call-seconds an eviction costs when the program's next call comes: the reload delays
    that call and every other call in the engine (their steps carry the reload)."""
    return reload_seconds * (1 + calls_slowed)


def memory_price(num_blocks: int, calls_short_of_blocks: int, blocks_per_call: int) -> float:
    """Calls kept waiting per second by holding `num_blocks` blocks: as many of the calls now
    short of blocks as those blocks would admit (each needing `blocks_per_call`)."""
    if calls_short_of_blocks <= 0:
        return 0.0
    return min(float(calls_short_of_blocks), num_blocks / max(1, blocks_per_call))


class ToolTimeLearner:
    """Return times per class (see the module docstring); a class uses its own samples once
    it has `min_samples`, the overall ones until then, none before that."""

    def __init__(self, window: int = 1000, min_samples: int = 16,
                 max_classes: int = 1024) -> None:
        self._windows: ClassWindows[ReturnTimes] = ClassWindows(
            ReturnTimes.build, window, min_samples, max_classes)

    def returned(self, key: Hashable, seconds: float) -> None:
        """A program of class `key` made its next call `seconds` after its last finished."""
        self._windows.observe(key, (max(0.0, seconds), 1.0))

    def ended(self, key: Hashable, seconds: float) -> None:
        """A program of class `key` ended `seconds` after its last call finished."""
        self._windows.observe(key, (max(0.0, seconds), 0.0))

    def times(self, key: Hashable) -> ReturnTimes | None:
        return self._windows.summary(key)

    def num_samples(self, key: Hashable | None = None) -> int:
        return self._windows.num_samples(key)
