"""Log-probabilities of sampled tokens (OpenAI's `logprobs` / `top_logprobs`).

They are of the model's raw distribution, `log_softmax(logits)` before temperature, top-k
and top-p (vLLM's default, "raw_logprobs"), in fp32: what was sampled from does not change
what the model thought. A call asks with `SamplingParams.logprobs` = the number of top
alternatives (0 to 20) it wants beside each sampled token's own.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class TokenLogprob:
    """One sampled token's log-probability and the `top` alternatives ((id, logprob), most
    likely first; the sampled token may be among them)."""

    token_id: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()


def token_logprobs(logits: torch.Tensor, tokens: list[int], wanted: list[int | None]
                   ) -> list[TokenLogprob | None]:
    """For each row of `logits` `[B, V]` whose `wanted[row]` is not None, the logprob of
    `tokens[row]` and its `wanted[row]` top alternatives; None for the other rows."""
    rows = [row for row, k in enumerate(wanted) if k is not None]
    out: list[TokenLogprob | None] = [None] * len(wanted)
    if not rows:
        return out
    logprobs = torch.log_softmax(logits[rows].float(), dim=-1)
    chosen = logprobs.gather(1, torch.tensor([[tokens[r]] for r in rows],
                                             device=logprobs.device)).squeeze(1).tolist()
    most = max(wanted[r] for r in rows)
    top_values, top_ids = (logprobs.topk(most, dim=-1) if most else
                           (logprobs[:, :0], logprobs[:, :0].long()))
    top_values, top_ids = top_values.tolist(), top_ids.tolist()
    for i, row in enumerate(rows):
        k = wanted[row]
        out[row] = TokenLogprob(tokens[row], chosen[i],
                                tuple(zip(top_ids[i][:k], top_values[i][:k])))
    return out
