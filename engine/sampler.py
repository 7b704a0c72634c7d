"""Token sampling: greedy, temperature, top-k, top-p, and per-call seeds.

A seeded call draws from a generator seeded by (seed, output position), so its tokens do not
depend on which other calls share the batch or on preemptions.
"""

from __future__ import annotations

import torch

from engine.sampling_params import SamplingParams


def filter_logits(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Mask (to -inf) everything outside the top-k and the top-p nucleus of one row `[V]`."""
    if 0 < top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True)
        probs = torch.softmax(sorted_logits, dim=-1)
        outside = torch.cumsum(probs, dim=-1) - probs > top_p
        logits = logits.clone()
        logits[order[outside]] = float("-inf")
    return logits


class Sampler:
    """Samples one token per row of `logits` `[B, V]` (fp32)."""

    def __init__(self, seed: int) -> None:
        self.generator = torch.Generator().manual_seed(seed)

    def __call__(self, logits: torch.Tensor, params: list[SamplingParams],
                 output_positions: list[int]) -> list[int]:
        greedy = logits.argmax(dim=-1).tolist()
        if all(p.greedy for p in params):
            return greedy
        logits_cpu = logits.cpu()
        for row, p in enumerate(params):
            if not p.greedy:
                greedy[row] = self._sample_row(logits_cpu[row], p, output_positions[row])
        return greedy

    def _sample_row(self, logits: torch.Tensor, p: SamplingParams, position: int) -> int:
        logits = filter_logits(logits / p.temperature, p.top_k, p.top_p)
        probs = torch.softmax(logits, dim=-1)
        generator = self.generator
        if p.seed is not None:
            generator = torch.Generator().manual_seed((p.seed * 1_000_003 + position) % 2**63)
        return int(torch.multinomial(probs, 1, generator=generator))
