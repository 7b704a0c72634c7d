"""Prompts are sized, tokenized and checked, and output grammars compiled, off the engine thread.

A text prompt larger than `max_prompt_bytes` (UTF-8) is refused before it is tokenized; the
rest are tokenized on one thread of lower OS priority (the tokenizer releases the GIL while it
works), so a client sending huge prompts never holds up the engine's steps. The engine thread
only re-checks the token ids it is given, which is cheap.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

from engine import ChatPrompt
from engine.structured.spec import StructuredOutput
from engine.structured.state import GrammarState
from server.limits import DEFAULT_MAX_PROMPT_BYTES

TOKENIZER_THREADS = 1  # huge prompts queue behind each other, not beside the engine
TOKENIZER_NICENESS = 10  # the OS runs the engine's steps first when cores are short


def _lower_priority() -> None:
    """Run this (tokenizer) thread at a lower OS priority, where the OS allows it."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), TOKENIZER_NICENESS)
    except (AttributeError, OSError):  # not Linux, or not permitted: same priority then
        pass


def prompt_bytes(prompt: str | list[int] | ChatPrompt) -> int:
    """A prompt's size as the limit counts it: UTF-8 bytes of text (a chat's contents and
    roles), 4 bytes per token id."""
    if isinstance(prompt, str):
        return len(prompt.encode("utf-8", "surrogatepass"))
    if isinstance(prompt, ChatPrompt):
        return sum(len(role.encode("utf-8", "surrogatepass"))
                   + len(content.encode("utf-8", "surrogatepass"))
                   for role, content in prompt.messages)
    return 4 * len(prompt)


class PromptCodec(Protocol):
    """What tokenizes and checks for a door, from any thread: an LLMEngine, or a router's
    `engine.text_codec.TextCodec` (ValueError naming the field for bad input)."""

    def tokenize_prompt(self, prompt: str | list[int] | ChatPrompt) -> list[int]: ...

    def token_texts(self, token_ids: Iterable[int]) -> dict[int, str]: ...

    def detokenize(self, token_ids: list[int]) -> str: ...

    def grammar_state(self, spec: StructuredOutput) -> GrammarState: ...


class PromptTokenizer:
    """Turns a front door's prompt into checked token ids, off the engine thread, with
    `codec`'s checks."""

    def __init__(self, codec: PromptCodec, max_prompt_bytes: int = DEFAULT_MAX_PROMPT_BYTES
                 ) -> None:
        if max_prompt_bytes <= 0:
            raise ValueError(f"max_prompt_bytes: must be positive, got {max_prompt_bytes}")
        self._codec = codec
        self.max_prompt_bytes = max_prompt_bytes
        self._pool = ThreadPoolExecutor(TOKENIZER_THREADS, thread_name_prefix="agentix-tokenize",
                                        initializer=_lower_priority)

    async def token_ids(self, prompt: str | list[int] | ChatPrompt) -> list[int]:
        """The prompt's token ids; ValueError naming `prompt` when it is too large or the
        codec refuses it (empty, outside the vocabulary, too long)."""
        size = prompt_bytes(prompt)
        if size > self.max_prompt_bytes:
            raise ValueError(f"prompt: {size} bytes exceed the server's limit of "
                             f"{self.max_prompt_bytes} (max_prompt_bytes)")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, self._codec.tokenize_prompt, prompt)

    async def token_texts(self, token_ids: Iterable[int]) -> dict[int, str]:
        """Each id's text, decoded alone (logprobs' tokens), off the engine thread."""
        ids = list(token_ids)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, self._codec.token_texts, ids)

    async def text(self, token_ids: list[int]) -> str:
        """The text of `token_ids`, off the engine thread (ValueError naming `tokens`)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, self._codec.detokenize, token_ids)

    async def compile_grammar(self, spec: StructuredOutput, field: str) -> None:
        """Compile `spec`'s output grammar into the codec's cache, off the engine thread;
        ValueError naming `field` (the request's own name for the grammar) when it cannot
        be compiled or this model cannot be constrained."""
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self._pool, self._codec.grammar_state, spec)
        except ValueError as exc:  # "json_schema: ..." or "structured: ...": the codec's
            raise ValueError(f"{field}: {str(exc).split(': ', 1)[-1]}") from None

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
