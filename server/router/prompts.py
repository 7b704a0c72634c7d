"""What the router needs of a prompt to place it: its length in tokens and the chained hashes
of its full blocks (`kvcache.prefix_hash.hash_block`, the replicas' prefix-cache keys).

Token-id prompts need nothing; text and chat prompts are tokenized with the model's own
tokenizer (the router loads only the tokenizer of `--model`, never weights), on a thread of
its own so the router's event loop never waits on it. Without a tokenizer a text prompt is
estimated at 4 bytes per token and has no block hashes. The replica still tokenizes and
checks every prompt itself; the router only refuses what it cannot size: a missing prompt, an
empty text, a text past `max_prompt_bytes` (INVALID_ARGUMENT naming `prompt`).
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from kvcache.prefix_hash import hash_block
from server import agentix_pb2 as pb
from server.limits import DEFAULT_MAX_PROMPT_BYTES

BYTES_PER_TOKEN_ESTIMATE = 4


@dataclass(frozen=True)
class PromptShape:
    num_tokens: int
    block_hashes: tuple[int, ...]


def block_hashes(token_ids: list[int], block_size: int) -> tuple[int, ...]:
    """The chained hashes of the prompt's full blocks of `block_size` tokens."""
    hashes: list[int] = []
    parent = None
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        parent = hash_block(parent, token_ids[start:start + block_size])
        hashes.append(parent)
    return tuple(hashes)


class RouterPrompts:
    """Sizes prompts (see the module docstring); `model_dir` None: no tokenizer;
    `chat_template` (a Jinja file, the replicas' own) replaces the model's template."""

    def __init__(self, model_dir: str | None, max_prompt_bytes: int = DEFAULT_MAX_PROMPT_BYTES,
                 chat_template: str | None = None) -> None:
        self.max_prompt_bytes = max_prompt_bytes
        self.tokenizer = None
        if model_dir is not None:
            from engine.tokenizer import load_tokenizer

            self.tokenizer = load_tokenizer(Path(model_dir))
        if chat_template is not None and self.tokenizer is not None:
            self.tokenizer.use_chat_template(Path(chat_template).read_text())
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="agentix-router-tokenize")

    async def shape(self, request: pb.GenerateRequest, block_size: int) -> PromptShape:
        """The prompt's length and block hashes (ValueError naming `prompt`)."""
        kind = request.WhichOneof("prompt")
        if kind is None:
            raise ValueError("prompt: missing; set text, token_ids or messages")
        if kind == "token_ids":
            ids = list(request.token_ids.ids)
            return PromptShape(len(ids), block_hashes(ids, block_size) if block_size else ())
        if kind == "text":
            if not request.text:
                raise ValueError("prompt: text must not be empty")
            size = len(request.text.encode("utf-8", "surrogatepass"))
        else:
            size = sum(len(m.role.encode("utf-8", "surrogatepass"))
                       + len(m.content.encode("utf-8", "surrogatepass"))
                       for m in request.messages.messages)
        if size > self.max_prompt_bytes:
            raise ValueError(f"prompt: {size} bytes exceed the server's limit of "
                             f"{self.max_prompt_bytes} (max_prompt_bytes)")
        if self.tokenizer is None:
            return PromptShape(max(1, size // BYTES_PER_TOKEN_ESTIMATE), ())
        loop = asyncio.get_running_loop()
        ids = await loop.run_in_executor(self._pool, self._tokenize, request)
        return PromptShape(len(ids), block_hashes(ids, block_size) if block_size else ())

    def _tokenize(self, request: pb.GenerateRequest) -> list[int]:
        if request.WhichOneof("prompt") == "text":
            return self.tokenizer.encode(request.text)
        from engine.chat_prompt import ChatPrompt

        try:
            chat = ChatPrompt(tuple((m.role, m.content) for m in request.messages.messages))
            return self.tokenizer.render_chat(chat)
        except ValueError:
            return []  # the replica refuses it with the reason; nothing to place by

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
