"""Shared pieces of the workload generators: the tokenizer, chat-length counting, seeded draws."""

from __future__ import annotations

import math
import random
import sys
from dataclasses import dataclass
from typing import Any, Sequence

from bench.sim.trace import Trace, TraceProgram, poisson_arrivals


def load_tokenizer() -> Any:
    """The SmolLM2 tokenizer (converted from the packaged GGUF on first use). It only counts
    tokens here, so texts longer than the model's context are fine (no length warning)."""
    from transformers import AutoTokenizer

    from engine.models.smollm2 import ensure_smollm2_dir

    return AutoTokenizer.from_pretrained(ensure_smollm2_dir(), model_max_length=sys.maxsize)


def token_counts(tokenizer: Any, texts: Sequence[str]) -> list[int]:
    """Token count of each text on its own (no special tokens), in one batched call."""
    if not texts:
        return []
    return [len(ids) for ids in tokenizer(list(texts), add_special_tokens=False)["input_ids"]]


@dataclass(frozen=True)
class ChatOverhead:
    """Tokens the chat template adds around message contents.

    The prompt of a history of messages m1..mk (ending with a user or tool message, followed by
    the generation prompt) is counted as `system + sum(per_message + tokens(mi)) + generation`,
    where `system` is the template's default system message when the history has none, else
    `per_message + tokens(system text)`. Contents are tokenized on their own, so a BPE merge across
    a content boundary is missed: the count can be off by a token or so per message, which is
    what buys counting a growing history in O(new message) instead of re-tokenizing it.
    """

    per_message: int
    generation: int
    default_system: int

    def system_tokens(self, system_content_tokens: int | None) -> int:
        if system_content_tokens is None:
            return self.default_system
        return self.per_message + system_content_tokens


def measure_chat_overhead(tokenizer: Any) -> ChatOverhead:
    """Measure `ChatOverhead` by rendering a few tiny chats through the tokenizer's template."""

    def overhead(messages: list[dict[str, str]]) -> int:
        rendered = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        total = len(tokenizer.encode(rendered, add_special_tokens=False))
        return total - sum(token_counts(tokenizer, [m["content"] for m in messages]))

    sys_user = overhead([{"role": "system", "content": "S"}, {"role": "user", "content": "x"}])
    sys_3 = overhead(
        [
            {"role": "system", "content": "S"},
            {"role": "user", "content": "x"},
            {"role": "assistant", "content": "y"},
            {"role": "user", "content": "z"},
        ]
    )
    per_message = (sys_3 - sys_user) // 2
    generation = sys_user - 2 * per_message
    default_system = overhead([{"role": "user", "content": "x"}]) - per_message - generation
    return ChatOverhead(per_message, generation, default_system)


def lognormal_int(rng: random.Random, mean: float, sigma: float, minimum: int, maximum: int) -> int:
    """A lognormal draw with the given mean (mu = ln(mean) - sigma^2 / 2), rounded and clipped to
    [minimum, maximum] (the clipping moves the mean a little when the bounds are near it)."""
    value = rng.lognormvariate(math.log(mean) - sigma * sigma / 2, sigma)
    return min(max(round(value), minimum), maximum)


def with_arrivals(programs: Sequence[TraceProgram], seed: int, rate: float) -> Trace:
    """The programs in order, with arrivals from `poisson_arrivals(len(programs), rate, seed)`."""
    from dataclasses import replace

    arrivals = poisson_arrivals(len(programs), rate, seed)
    return Trace(tuple(replace(p, arrival=a) for p, a in zip(programs, arrivals)))


def check_num_programs(num_programs: int) -> None:
    if num_programs < 1:
        raise ValueError(f"num_programs: must be >= 1, got {num_programs}")
