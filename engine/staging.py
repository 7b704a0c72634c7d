"""One host-to-device transfer per step for a step's index tensors (CUDA).

`HostStaging.upload` packs int lists into one reusable host buffer (pinned on CUDA, so the
copy is asynchronous and needs no pageable bounce) and copies it to the device in one
transfer, returning int64 device views, one per list. Before the buffer is rewritten, the
previous transfer out of it is waited for (a CUDA event), so a reused buffer is never
overwritten while the device still reads it.
"""

from __future__ import annotations

import itertools
from typing import Sequence

import torch


class HostStaging:
    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.pinned = device.type == "cuda"
        self._host = torch.empty(0, dtype=torch.long, pin_memory=self.pinned)
        self._copied: torch.cuda.Event | None = None

    def upload(self, parts: Sequence[Sequence[int]]) -> list[torch.Tensor]:
        """`parts` on the device as int64 tensors (views of one buffer), in order."""
        sizes = [len(p) for p in parts]
        total = sum(sizes)
        if self._copied is not None:
            self._copied.synchronize()
        if self._host.numel() < total:
            self._host = torch.empty(max(total, 2 * self._host.numel()), dtype=torch.long,
                                     pin_memory=self.pinned)
        host = self._host[:total]
        host.copy_(torch.tensor(list(itertools.chain.from_iterable(parts)), dtype=torch.long))
        device = host.to(self.device, non_blocking=True)
        if self.pinned:
            self._copied = torch.cuda.Event()
            self._copied.record()
        return list(device.split(sizes))
