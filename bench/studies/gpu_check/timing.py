"""Median time of a device function: CUDA events on CUDA, the wall clock elsewhere."""

from __future__ import annotations

import statistics
import time
from typing import Callable

import torch


def median_seconds(fn: Callable[[], object], device: torch.device, iters: int = 20,
                   warmup: int = 3) -> float:
    """Median over `iters` calls of `fn` after `warmup` calls; each call timed on its own."""
    for _ in range(warmup):
        fn()
    if device.type != "cuda":
        samples = []
        for _ in range(iters):
            started = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - started)
        return statistics.median(samples)
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(iters)]
    torch.cuda.synchronize(device)
    for start, end in events:
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize(device)
    return statistics.median(start.elapsed_time(end) for start, end in events) / 1e3
