"""Peak memory of a process together with its descendants, sampled from outside.

An engine that runs as several processes (vLLM's frontend, engine core and worker) is measured
the same way as one that runs as one: the sum over the process and every descendant, sampled
by a thread of the measuring process (not of the measured one), of RSS (pages two processes
share count in each) and of PSS (a shared page split among those that map it, so the sum
counts it once; pages shared with processes outside the tree count in part). RSS is cheap to
read; PSS is not (the kernel walks the page tables, about 20 ms of CPU for a 3 GB process,
taken from the cores the engine runs on), so it is read every `pss_every`-th sample only. A
spike shorter than the sampling period can be missed.
"""

from __future__ import annotations

import threading

import psutil

MB = 1 << 20


def _tree(pid: int) -> list[psutil.Process]:
    """`pid` and its descendants ([] once it has gone)."""
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def tree_memory_mb(pid: int, pss: bool = True) -> tuple[float, float]:
    """(RSS, PSS) of `pid` and its descendants now, in MiB; PSS 0.0 unless `pss`. A process
    that has gone, or ends while being read, counts nothing."""
    rss = pss_bytes = 0
    for process in _tree(pid):
        try:
            if pss:
                info = process.memory_full_info()
                rss, pss_bytes = rss + info.rss, pss_bytes + info.pss
            else:
                rss += process.memory_info().rss
        except psutil.NoSuchProcess:
            continue
    return rss / MB, pss_bytes / MB


class PeakTreeMemory:
    """`with PeakTreeMemory(pid) as peak: ...` samples `tree_memory_mb(pid)` every `interval`
    seconds (PSS in every `pss_every`-th sample, the first included) until the block ends;
    `peak.rss_mb` and `peak.pss_mb` are the largest samples of each (one more with PSS is
    taken on exit)."""

    def __init__(self, pid: int, interval: float = 0.5, pss_every: int = 10):
        if interval <= 0:
            raise ValueError(f"interval: must be > 0, got {interval}")
        if pss_every < 1:
            raise ValueError(f"pss_every: must be >= 1, got {pss_every}")
        self.pid, self.interval, self.pss_every = pid, interval, pss_every
        self.rss_mb = self.pss_mb = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _take(self, pss: bool) -> None:
        rss, pss_mb = tree_memory_mb(self.pid, pss)
        self.rss_mb, self.pss_mb = max(self.rss_mb, rss), max(self.pss_mb, pss_mb)

    def _sample(self) -> None:
        taken = 0
        while True:
            self._take(taken % self.pss_every == 0)
            taken += 1
            if self._stop.wait(self.interval):
                return

    def __enter__(self) -> PeakTreeMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._take(pss=True)

    def figures(self) -> dict[str, float]:
        """{"peak_tree_rss_mb": ..., "peak_tree_pss_mb": ...}"""
        return {"peak_tree_rss_mb": self.rss_mb, "peak_tree_pss_mb": self.pss_mb}
