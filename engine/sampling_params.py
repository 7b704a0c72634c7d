"""Per-call sampling parameters."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from engine.structured.spec import StructuredOutput

GREEDY_BELOW = 1e-5  # a temperature this small samples greedily (logits / T would overflow)
# Bounds on what one call may ask the engine to watch for (OpenAI allows 4 stop strings). The
# stop-string scan of each new token costs O(MAX_STOP_STRINGS * MAX_STOP_STRING_CHARS) at most.
MAX_STOP_STRINGS = 16
MAX_STOP_STRING_CHARS = 256
MAX_STOP_TOKEN_IDS = 64
MAX_LOGPROBS = 20  # OpenAI's bound on top_logprobs


@dataclass(frozen=True)
class SamplingParams:
    """How one call samples and when it stops.

    Greedy when `temperature` is below 1e-5 (0 by default). `top_k == 0` and `top_p == 1`
    disable those filters.
    A `seed` makes the call's sampling reproducible, independent of its batch neighbours.
    `logprobs` (0 to 20; None: off) returns each sampled token's log-probability and that
    many most likely alternatives (`engine.logprobs`); `prompt_logprobs` (0 to 20; None: off)
    does the same for each prompt token after the first (a call asking for them computes its
    whole prompt: it takes no prefix-cache hits).
    `structured` constrains the output to a grammar (`engine.structured`): every token is
    sampled among those the grammar allows, and the call stops once the grammar is complete.
    A call stops at `max_tokens`, at any of `stop_token_ids`, at the model's EOS unless
    `ignore_eos`, or when its text ends with one of the `stop` strings (which is cut off).
    At most MAX_STOP_STRINGS stop strings of 1 to MAX_STOP_STRING_CHARS characters each, and at
    most MAX_STOP_TOKEN_IDS stop token ids.
    """

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None
    max_tokens: int = 16
    stop: tuple[str, ...] = field(default_factory=tuple)
    stop_token_ids: tuple[int, ...] = field(default_factory=tuple)
    ignore_eos: bool = False
    logprobs: int | None = None  # each token's logprob and this many top alternatives
    prompt_logprobs: int | None = None  # the same for each prompt token (OpenAI's `echo`)
    structured: StructuredOutput | None = None  # the output's grammar (constrained decoding)

    def __post_init__(self) -> None:
        if isinstance(self.stop, str):
            object.__setattr__(self, "stop", (self.stop,))
        object.__setattr__(self, "stop", tuple(self.stop))
        object.__setattr__(self, "stop_token_ids", tuple(self.stop_token_ids))
        if not math.isfinite(self.temperature) or self.temperature < 0:
            raise ValueError(f"temperature must be a finite number >= 0, got {self.temperature}")
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int)
                                      or not 0 <= self.seed < 2**63):
            raise ValueError(f"seed must be an integer in [0, 2**63), got {self.seed!r}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 disables it), got {self.top_k}")
        if self.max_tokens <= 0:
            raise ValueError(f"max_tokens must be positive, got {self.max_tokens}")
        if len(self.stop) > MAX_STOP_STRINGS:
            raise ValueError(f"stop: at most {MAX_STOP_STRINGS} strings, got {len(self.stop)}")
        if any(not isinstance(s, str) for s in self.stop):
            raise ValueError("stop: stop strings must be strings")
        if any(s == "" for s in self.stop):
            raise ValueError("stop: stop strings must be non-empty")
        if (longest := max((len(s) for s in self.stop), default=0)) > MAX_STOP_STRING_CHARS:
            raise ValueError(f"stop: each stop string may have at most {MAX_STOP_STRING_CHARS} "
                             f"characters, got one of {longest}")
        _check_logprobs_count("logprobs", self.logprobs)
        _check_logprobs_count("prompt_logprobs", self.prompt_logprobs)
        if self.structured is not None and not isinstance(self.structured, StructuredOutput):
            raise ValueError(f"structured: must be a StructuredOutput, got "
                             f"{type(self.structured).__name__}")
        if len(self.stop_token_ids) > MAX_STOP_TOKEN_IDS:
            raise ValueError(f"stop_token_ids: at most {MAX_STOP_TOKEN_IDS} ids, got "
                             f"{len(self.stop_token_ids)}")

    @property
    def greedy(self) -> bool:
        return self.temperature < GREEDY_BELOW


def _check_logprobs_count(name: str, count: int | None) -> None:
    """ValueError naming `name` unless `count` is None or an integer in [0, MAX_LOGPROBS]."""
    if count is not None and (isinstance(count, bool) or not isinstance(count, int)
                              or not 0 <= count <= MAX_LOGPROBS):
        raise ValueError(f"{name}: must be an integer in [0, {MAX_LOGPROBS}] (None: off), "
                         f"got {count!r}")
