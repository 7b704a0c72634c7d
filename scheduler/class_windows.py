"""The last samples of a distribution, overall and per class, with a summary of each.

Both learnt parts of the scheduler use it: program sizes (`scheduler.gittins`) and the times
programs take to come back from a tool (`scheduler.tool_times`). A summary is rebuilt from a
window's samples only when an eighth of them are new, never per step.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable, Hashable, Iterator
from typing import Generic, TypeVar

import numpy as np

Summary = TypeVar("Summary")


class _Window(Generic[Summary]):
    """The last `window` samples of one distribution and its summary."""

    def __init__(self, window: int) -> None:
        self.samples: deque[tuple[float, ...]] = deque(maxlen=window)
        self.new = 0
        self.summary: Summary | None = None

    def add(self, sample: tuple[float, ...], min_samples: int,
            build: Callable[[np.ndarray], Summary]) -> bool:
        """Add a sample; returns whether the summary was rebuilt."""
        self.samples.append(sample)
        self.new += 1
        if len(self.samples) < min_samples or self.new < max(1, len(self.samples) // 8):
            return False
        self.summary = build(np.array(self.samples, dtype=float))
        self.new = 0
        return True


class ClassWindows(Generic[Summary]):
    """The last `window` samples overall and per class (at most `max_classes` classes, the
    least recently seen forgotten first), each window summarised by `build` (given the
    samples as an array, one row per sample) once it holds `min_samples`. A class without a
    summary yet is answered with the overall one; before that, with None."""

    def __init__(self, build: Callable[[np.ndarray], Summary], window: int = 1000,
                 min_samples: int = 16, max_classes: int = 1024) -> None:
        if window < 1 or not 1 <= min_samples <= window or max_classes < 1:
            raise ValueError(f"need window >= min_samples >= 1 and max_classes >= 1, got "
                             f"{window}, {min_samples}, {max_classes}")
        self.build = build
        self.window = window
        self.min_samples = min_samples
        self.max_classes = max_classes
        self._overall: _Window[Summary] = _Window(window)
        self._classes: OrderedDict[Hashable, _Window[Summary]] = OrderedDict()

    def observe(self, key: Hashable, sample: tuple[float, ...]) -> bool:
        """Record one sample of class `key`; returns whether any summary in use changed (a
        rebuild, or a class forgotten)."""
        window = self._classes.pop(key, None) or _Window(self.window)
        self._classes[key] = window
        forgotten = len(self._classes) > self.max_classes
        if forgotten:
            self._classes.popitem(last=False)
        rebuilt = [target.add(sample, self.min_samples, self.build)
                   for target in (window, self._overall)]
        return any(rebuilt) or forgotten

    def summary(self, key: Hashable) -> Summary | None:
        window = self._classes.get(key)
        if window is not None and window.summary is not None:
            return window.summary
        return self._overall.summary

    def summaries(self) -> Iterator[Summary]:
        """Every summary built, overall and per class."""
        for window in (self._overall, *self._classes.values()):
            if window.summary is not None:
                yield window.summary

    def num_samples(self, key: Hashable | None = None) -> int:
        """Samples held for class `key` (overall when None)."""
        window = self._overall if key is None else self._classes.get(key)
        return 0 if window is None else len(window.samples)
