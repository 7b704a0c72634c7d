"""OpenAI's logprobs shapes from the engine's `TokenLogprob`s: chat's `logprobs.content`
(token, logprob, bytes, top_logprobs) and the completions API's legacy arrays (tokens,
token_logprobs, top_logprobs, text_offset). A token's text is its id decoded alone (`texts`),
so a token that is part of a multi-byte character shows as its replacement character, as on
vLLM; `bytes` are its text's UTF-8 bytes."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from engine.logprobs import TokenLogprob


def token_ids_of(entries: Iterable[TokenLogprob]) -> set[int]:
    """Every id whose text the shapes below need."""
    return {i for e in entries for i in (e.token_id, *(t for t, _ in e.top))}


def _token(token_id: int, logprob: float, texts: Mapping[int, str]) -> dict[str, Any]:
    text = texts[token_id]
    return {"token": text, "logprob": logprob, "bytes": list(text.encode())}


def chat_logprobs(entries: list[TokenLogprob], texts: Mapping[int, str]) -> dict[str, Any]:
    return {"content": [{**_token(e.token_id, e.logprob, texts),
                         "top_logprobs": [_token(t, v, texts) for t, v in e.top]}
                        for e in entries]}


def completion_logprobs(entries: list[TokenLogprob], texts: Mapping[int, str],
                        offset: int = 0) -> dict[str, Any]:
    """The legacy arrays; `text_offset` counts characters from `offset`."""
    offsets = []
    for e in entries:
        offsets.append(offset)
        offset += len(texts[e.token_id])
    return {"tokens": [texts[e.token_id] for e in entries],
            "token_logprobs": [e.logprob for e in entries],
            "top_logprobs": [{texts[t]: v for t, v in e.top} for e in entries],
            "text_offset": offsets}


def prompt_logprobs(prompt_ids: list[int], entries: list[TokenLogprob | None],
                    texts: Mapping[int, str]) -> dict[str, Any]:
    """An echoed prompt's legacy arrays (`text_offset` from 0): every prompt token, its
    logprob and top alternatives from `entries` (None for the first: nothing predicts it;
    None too for a position the call never computed, cut short)."""
    entries = list(entries) + [None] * (len(prompt_ids) - len(entries))
    offsets, offset = [], 0
    for token_id in prompt_ids:
        offsets.append(offset)
        offset += len(texts[token_id])
    return {"tokens": [texts[t] for t in prompt_ids],
            "token_logprobs": [e.logprob if e else None for e in entries],
            "top_logprobs": [{texts[t]: v for t, v in e.top} if e else None for e in entries],
            "text_offset": offsets}


def joined(first: dict[str, Any], then: dict[str, Any] | None) -> dict[str, Any]:
    """Two legacy logprobs arrays one after the other (`then`'s offsets already follow)."""
    if then is None:
        return first
    return {key: first[key] + then[key] for key in first}
