"""Peak memory of a process together with its descendants, sampled from outside.

An engine that runs as several processes (vLLM's frontend, engine core and worker) is measured
the same way as one that runs as one: the sum over the process and every descendant, sampled
every `interval` seconds by a thread of the measuring process (not of the measured one), of
RSS (pages two processes share count in each) and of PSS (a shared page split among those
that map it, so the sum counts it once; pages shared with processes outside the tree count in
part). A spike shorter than `interval` can be missed.
"""

from __future__ import annotations

import threading

import psutil

MB = 1 << 20


def tree_memory_mb(pid: int) -> tuple[float, float]:
    """(RSS, PSS) of `pid` and its descendants now, in MiB ((0, 0) once it has gone; a
    process that ends while being read counts nothing)."""
    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0, 0.0
    rss = pss = 0
    for process in processes:
        try:
            info = process.memory_full_info()
        except psutil.NoSuchProcess:
            continue
        rss, pss = rss + info.rss, pss + info.pss
    return rss / MB, pss / MB


class PeakTreeMemory:
    """`with PeakTreeMemory(pid) as peak: ...` samples `tree_memory_mb(pid)` until the block
    ends; `peak.rss_mb` and `peak.pss_mb` are the largest samples of each (one is taken on
    entry and one on exit)."""

    def __init__(self, pid: int, interval: float = 0.2):
        if interval <= 0:
            raise ValueError(f"interval: must be > 0, got {interval}")
        self.pid, self.interval = pid, interval
        self.rss_mb = self.pss_mb = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _take(self) -> None:
        rss, pss = tree_memory_mb(self.pid)
        self.rss_mb, self.pss_mb = max(self.rss_mb, rss), max(self.pss_mb, pss)

    def _sample(self) -> None:
        while True:
            self._take()
            if self._stop.wait(self.interval):
                return

    def __enter__(self) -> PeakTreeMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._take()

    def figures(self) -> dict[str, float]:
        """{"peak_tree_rss_mb": ..., "peak_tree_pss_mb": ...}"""
        return {"peak_tree_rss_mb": self.rss_mb, "peak_tree_pss_mb": self.pss_mb}
