"""What the engine hands back: per-step deltas and finished completions."""

from __future__ import annotations

from dataclasses import dataclass

from engine.logprobs import TokenLogprob


@dataclass(slots=True)
class StepOutput:
    """Tokens one call produced in one engine step (with their logprobs when it asked).
    Read-only once made (not frozen only because a frozen dataclass is slow to build, and
    the engine builds one per sampled token)."""

    call_id: str
    new_token_ids: list[int]
    finished: bool
    finish_reason: str | None
    logprobs: list[TokenLogprob] | None = None


@dataclass(frozen=True)
class CompletionOutput:
    """A finished call: generated ids, their text (stop string cut off), why it ended, and
    its usage (prompt tokens are `len(prompt_token_ids)`) and its times on the engine's clock:
    arrival, first token (None if it produced none) and finish. `logprobs`: one per generated
    token when the call asked for them (`SamplingParams.logprobs`), else None.
    `prompt_logprobs`: one per prompt token when the call asked for them
    (`SamplingParams.prompt_logprobs`), else None; None for the first token (nothing predicts
    it); fewer only if the call ended (aborted, failed) before its whole prompt was computed."""

    call_id: str
    prompt_token_ids: list[int]
    token_ids: list[int]
    text: str
    finish_reason: str
    num_cached_tokens: int
    num_preemptions: int
    queue_seconds: float
    service_seconds: float
    arrival_time: float
    first_token_time: float | None
    finish_time: float
    logprobs: list[TokenLogprob] | None = None
    prompt_logprobs: list[TokenLogprob | None] | None = None
