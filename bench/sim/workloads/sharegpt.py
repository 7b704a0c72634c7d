"""ShareGPT workload: one real conversation = one sequential program.

Conversations come from `bench.sim.sharegpt.load_conversations()` (the packaged ShareGPT file),
taken in the order of `random.Random(seed).shuffle`. A leading "system" turn becomes the system
message (else the template's default one). The rest is read as alternating user / assistant turns
starting with a user turn; reading stops at the first turn that breaks the alternation, and a
trailing user turn without a reply is dropped. Each assistant turn is one call:

- prompt = the whole history so far (system + all previous turns + this user turn) with the chat
  template and its generation prompt, counted under the SmolLM2 tokenizer incrementally (each
  message tokenized once; see `ChatOverhead` for the approximation);
- output = the real reply's token count clipped to [1, MAX_OUTPUT_TOKENS];
- parent = the previous call, delay 0 (the paper does not model user think time).

A conversation with no call, or with any call whose prompt exceeds MAX_PROMPT_TOKENS, is skipped.
"""

from __future__ import annotations

import random
from typing import Any, Sequence

from bench.sim.sharegpt import ASSISTANT_ROLES, USER_ROLES, Conversation, load_conversations
from bench.sim.trace import Trace, TraceCall, TraceProgram
from bench.sim.workloads.common import (ChatOverhead, check_num_programs, load_tokenizer,
                                        measure_chat_overhead, token_counts, with_arrivals)

WORKLOAD = "sharegpt"
MAX_PROMPT_TOKENS = 8192
MAX_OUTPUT_TOKENS = 2048


def generate(
    num_programs: int,
    seed: int,
    rate: float,
    *,
    tokenizer: Any = None,
    conversations: Sequence[Conversation] | None = None,
) -> Trace:
    """`num_programs` conversations as programs with Poisson(`rate`) arrivals, deterministic per
    `seed`. `tokenizer` defaults to `load_tokenizer()`, `conversations` to `load_conversations()`.
    Raises ValueError when fewer than `num_programs` conversations qualify."""
    check_num_programs(num_programs)
    tokenizer = load_tokenizer() if tokenizer is None else tokenizer
    conversations = load_conversations() if conversations is None else conversations
    overhead = measure_chat_overhead(tokenizer)
    order = list(range(len(conversations)))
    random.Random(seed).shuffle(order)
    programs: list[TraceProgram] = []
    for index in order:
        calls = _conversation_calls(conversations[index], tokenizer, overhead)
        if calls is None:
            continue
        programs.append(TraceProgram(f"{WORKLOAD}-{len(programs)}", 0.0, calls, WORKLOAD))
        if len(programs) == num_programs:
            return with_arrivals(programs, seed, rate)
    raise ValueError(f"num_programs: only {len(programs)} of {len(conversations)} conversations qualify")


def _conversation_calls(conversation: Conversation, tokenizer: Any, overhead: ChatOverhead) -> tuple[TraceCall, ...] | None:
    turns = list(conversation.turns)
    system_text = None
    if turns and turns[0].role == "system":
        system_text = turns.pop(0).text
    pairs: list[tuple[str, str]] = []
    for i in range(0, len(turns) - 1, 2):
        if turns[i].role not in USER_ROLES or turns[i + 1].role not in ASSISTANT_ROLES:
            break
        pairs.append((turns[i].text, turns[i + 1].text))
    if not pairs:
        return None
    texts = [text for pair in pairs for text in pair]
    if system_text is not None:
        texts.append(system_text)
    counts = token_counts(tokenizer, texts)
    history = overhead.system_tokens(counts[-1] if system_text is not None else None)
    calls: list[TraceCall] = []
    for i in range(len(pairs)):
        user_tokens, reply_tokens = counts[2 * i], counts[2 * i + 1]
        history += overhead.per_message + user_tokens
        prompt_len = history + overhead.generation
        if prompt_len > MAX_PROMPT_TOKENS:
            return None
        output_len = min(max(reply_tokens, 1), MAX_OUTPUT_TOKENS)
        parents = (calls[-1].call_id,) if calls else ()
        calls.append(TraceCall(f"c{i}", prompt_len, output_len, parents))
        history += overhead.per_message + reply_tokens
    return tuple(calls)
