"""The token masks of a step's constrained calls: filled on a worker thread while the forward
pass runs (llguidance releases the GIL), then applied to those calls' logits rows only, so
unconstrained calls in the batch pay nothing but the wait for the fill, if it is longer."""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import torch

from engine.structured.state import GrammarState


def unpack_bits(bitmask: torch.Tensor, vocab_size: int, device: torch.device) -> torch.Tensor:
    """bool `[n, vocab_size]` on `device` from a CPU int32 `[n, ceil(V / 32)]` bitmask (bit k
    of word w: token 32w + k allowed). On the CPU one numpy pass over the bytes (little-endian
    words); elsewhere the words go over and are unpacked there (no compiled kernel: nothing
    to build on first use)."""
    if device.type == "cpu":
        bits = np.unpackbits(bitmask.numpy().view(np.uint8), axis=1, bitorder="little")
        return torch.from_numpy(bits[:, :vocab_size]).bool()
    words = bitmask.to(device, non_blocking=True)
    shifts = torch.arange(32, device=device, dtype=torch.int32)
    bits = (words.unsqueeze(-1) >> shifts) & 1
    return bits.view(words.shape[0], -1)[:, :vocab_size].bool()


@dataclass(frozen=True)
class FilledMasks:
    """`bitmask[j]` (int32 words, bit t: token t allowed) belongs to logits row `rows[j]`."""

    rows: tuple[int, ...]
    bitmask: torch.Tensor


class MaskFiller:
    """One worker thread fills a step's masks (`start`), `apply` waits for them."""

    def __init__(self, vocab_size: int) -> None:
        self.vocab_size = vocab_size
        self._worker = ThreadPoolExecutor(1, thread_name_prefix="grammar-masks")

    def start(self, states: list[GrammarState | None]) -> Future[FilledMasks] | None:
        """Begin filling the masks of the rows whose state is not None (None: no row
        constrained, nothing to do)."""
        rows = tuple(i for i, state in enumerate(states) if state is not None)
        if not rows:
            return None
        return self._worker.submit(self._fill, rows, [states[i] for i in rows])

    def _fill(self, rows: tuple[int, ...], states: list[GrammarState]) -> FilledMasks:
        bitmask = torch.full((len(rows), (self.vocab_size + 31) // 32), -1, dtype=torch.int32)
        for j, state in enumerate(states):
            state.fill_mask(bitmask[j])
        return FilledMasks(rows, bitmask)

    @staticmethod
    def apply(logits: torch.Tensor, pending: Future[FilledMasks] | None) -> torch.Tensor:
        """`logits` `[B, V]` with the forbidden tokens of the constrained rows at -inf (a
        new tensor; `logits` itself is left as the model gave it, for logprobs)."""
        if pending is None:
            return logits
        masks = pending.result()
        index = torch.tensor(masks.rows, device=logits.device)
        allowed = unpack_bits(masks.bitmask, logits.shape[1], logits.device)
        masked = logits.clone()
        masked[index] = logits.index_select(0, index).masked_fill(~allowed, float("-inf"))
        return masked

    def close(self) -> None:
        """Stop the worker thread (idempotent; `start` cannot be called afterwards)."""
        self._worker.shutdown(wait=False)
