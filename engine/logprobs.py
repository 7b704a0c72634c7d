"""Log-probabilities of sampled and prompt tokens (OpenAI's `logprobs` / `top_logprobs`, and
`echo`'s prompt logprobs).

They are of the model's raw distribution, `log_softmax(logits)` before temperature, top-k
and top-p (vLLM's default, "raw_logprobs"), in fp32: what was sampled from does not change
what the model thought. A call asks with `SamplingParams.logprobs` = the number of top
alternatives (0 to 20) it wants beside each sampled token's own, and with
`SamplingParams.prompt_logprobs` for each prompt token after the first (the logits at
position i - 1 score prompt token i).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

MAX_SCORED_LOGITS = 1 << 24  # prompt logits made at once: 64 MiB in fp32


@dataclass(frozen=True)
class TokenLogprob:
    """One token's log-probability (sampled, or of the prompt) and the `top` alternatives
    ((id, logprob), most likely first; the token itself may be among them)."""

    token_id: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()


def token_logprobs(logits: torch.Tensor, tokens: list[int], wanted: list[int | None]
                   ) -> list[TokenLogprob | None]:
    """For each row of `logits` `[B, V]` whose `wanted[row]` is not None, the logprob of
    `tokens[row]` and its `wanted[row]` top alternatives; None for the other rows."""
    rows = [row for row, k in enumerate(wanted) if k is not None]
    out: list[TokenLogprob | None] = [None] * len(wanted)
    if rows:
        scored = _scored(logits[rows], [tokens[r] for r in rows],
                         [k for k in wanted if k is not None])
        for row, logprob in zip(rows, scored):
            out[row] = logprob
    return out


def prompt_token_logprobs(head: Callable[[torch.Tensor], torch.Tensor], hidden: torch.Tensor,
                          tokens: list[int], wanted: list[int], vocab_size: int,
                          max_logits: int = MAX_SCORED_LOGITS) -> list[TokenLogprob]:
    """For each row of `hidden` `[N, H]`, the logprob of `tokens[row]` under the logits
    `head(hidden[row])` and its `wanted[row]` top alternatives. The logits are made and
    reduced a slice of rows at a time (at most `max_logits` of them, `vocab_size` per row),
    so only the chosen logprobs and top alternatives outlive a slice; for a given `N`,
    `head` is called the same number of times on the same shapes (tensor-parallel ranks
    call it together)."""
    rows = max(1, max_logits // vocab_size)
    out: list[TokenLogprob] = []
    for first in range(0, len(tokens), rows):
        end = first + rows
        out.extend(_scored(head(hidden[first:end]), tokens[first:end], wanted[first:end]))
    return out


def _scored(logits: torch.Tensor, tokens: list[int], wanted: list[int]) -> list[TokenLogprob]:
    """Row i's logprob of `tokens[i]` and its `wanted[i]` top alternatives (fp32)."""
    logprobs = torch.log_softmax(logits.float(), dim=-1)
    chosen = logprobs.gather(1, torch.tensor(tokens, device=logprobs.device)[:, None]
                             ).squeeze(1).tolist()
    most = max(wanted)
    top_values, top_ids = (logprobs.topk(most, dim=-1) if most else
                           (logprobs[:, :0], logprobs[:, :0].long()))
    top_values, top_ids = top_values.tolist(), top_ids.tolist()
    return [TokenLogprob(token, chosen[i], tuple(zip(top_ids[i][:k], top_values[i][:k])))
            for i, (token, k) in enumerate(zip(tokens, wanted))]
