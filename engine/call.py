"""One LLM call inside the engine: its tokens, progress and status."""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.detokenizer import StopStringScanner
from engine.logprobs import TokenLogprob
from engine.sampling_params import SamplingParams
from engine.structured.state import GrammarState
from scheduler.call_state import CallStatus

__all__ = ["Call", "CallStatus", "FinishReason"]


class FinishReason:
    STOP = "stop"        # EOS, a stop token id or a stop string
    LENGTH = "length"    # max_tokens or the model's context length
    ABORT = "abort"      # aborted by the client
    ERROR = "error"      # part of a step that failed (StepFailedError)


@dataclass(eq=False)
class Call:
    """A call owns its token list (`all_token_ids` = prompt + output); the scheduler moves it
    between statuses and advances `num_computed_tokens` (tokens whose K/V are cached)."""

    call_id: str
    prompt_token_ids: list[int]
    params: SamplingParams
    arrival_time: float
    arrival_index: int
    max_model_len: int
    program_id: str | None = None
    eos_token_ids: frozenset[int] = frozenset()
    status: CallStatus = CallStatus.WAITING
    all_token_ids: list[int] = field(default_factory=list)
    num_computed_tokens: int = 0
    num_cached_tokens: int = 0
    num_preemptions: int = 0
    finish_reason: str | None = None
    output_text: str | None = None
    queue_seconds: float = 0.0    # set when it finishes: time it waited (queued or swapped)
    service_seconds: float = 0.0  # set when it finishes: service charged to it
    first_token_time: float | None = None  # engine clock, when its first token was sampled
    logprobs: list[TokenLogprob] = field(default_factory=list)  # when params.logprobs is set
    # When params.prompt_logprobs is set: one per prompt position collected so far (None for
    # position 0), kept across preemptions (`prompt_logprob_positions`).
    prompt_logprobs: list[TokenLogprob | None] = field(default_factory=list)
    finish_time: float | None = None
    # The engine's incremental text and stop-string scan, for a call with stop strings
    # (made at its first token; None for calls without stop strings).
    stop_scanner: StopStringScanner | None = field(default=None, repr=False)
    # Its output grammar's state (structured output), advanced with every token it appends.
    grammar: GrammarState | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.all_token_ids = list(self.prompt_token_ids)
        # Fixed at creation (read once per step on the hot path): the prompt never changes.
        self.num_prompt_tokens = len(self.prompt_token_ids)
        self._token_limit = min(self.num_prompt_tokens + self.params.max_tokens,
                                self.max_model_len)
        if self.params.prompt_logprobs is not None:
            self.prompt_logprobs = [None]  # nothing predicts the first token

    @property
    def takes_prefix_hits(self) -> bool:
        """Whether a prefix-cache lookup may give it cached blocks: not while it still needs
        prompt logprobs (those need the logits of every prompt position it has not scored).
        It offers its own blocks to the cache either way."""
        return (self.params.prompt_logprobs is None
                or len(self.prompt_logprobs) == self.num_prompt_tokens)

    def prompt_logprob_positions(self, start: int, end: int) -> range:
        """The positions among its tokens [start, end) whose logits score a prompt token it
        has no logprob for yet (position p scores token p + 1), in order; empty unless it
        asked for prompt logprobs. Positions scored before a preemption are not again."""
        if self.params.prompt_logprobs is None:
            return range(0)
        return range(max(start, len(self.prompt_logprobs) - 1),
                     min(end, self.num_prompt_tokens - 1))

    @property
    def num_tokens(self) -> int:
        return len(self.all_token_ids)

    @property
    def output_token_ids(self) -> list[int]:
        return self.all_token_ids[self.num_prompt_tokens:]

    @property
    def num_output_tokens(self) -> int:
        return self.num_tokens - self.num_prompt_tokens

    @property
    def num_remaining_tokens(self) -> int:
        """Tokens it may still generate: up to `max_tokens` and the model's context."""
        return self._token_limit - len(self.all_token_ids)

    def append_token(self, token: int) -> str | None:
        """Append a sampled `token`; then STOP for a stop token id, (unless `ignore_eos`) an
        EOS id or an output grammar now complete, ERROR for a token the grammar refuses
        (its mask forbids that: a fault; or its grammar library failed), LENGTH once the
        token limit is reached, else None. Stop strings are the engine's (they need the
        text)."""
        self.all_token_ids.append(token)
        if self.grammar is not None:
            accepted = self.grammar.advance(token)
            if not accepted:
                return FinishReason.ERROR
            if self.grammar.is_complete:
                return FinishReason.STOP
        p = self.params
        if token in p.stop_token_ids or (not p.ignore_eos and token in self.eos_token_ids):
            return FinishReason.STOP
        if self.num_remaining_tokens <= 0:
            return FinishReason.LENGTH
        return None

    @property
    def is_finished(self) -> bool:
        return self.status is CallStatus.FINISHED
