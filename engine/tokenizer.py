"""Text <-> token ids, and chat prompts, through the model directory's HF tokenizer."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

CHAT_ROLES = frozenset({"system", "user", "assistant", "tool", "developer"})


@dataclass(frozen=True)
class ChatPrompt:
    """A conversation as (role, content) pairs; the engine renders it with the model's chat
    template and appends the generation prompt (the assistant turn to be written)."""

    messages: tuple[tuple[str, str], ...]

    def __post_init__(self) -> None:
        if not self.messages:
            raise ValueError("messages: must not be empty")
        for i, message in enumerate(self.messages):
            if not (isinstance(message, tuple) and len(message) == 2
                    and all(isinstance(part, str) for part in message)):
                raise ValueError(f"messages[{i}]: must be a (role, content) pair of strings")
            if message[0] not in CHAT_ROLES:
                raise ValueError(f"messages[{i}].role: must be one of {sorted(CHAT_ROLES)}, "
                                 f"got {message[0][:32]!r}")

    @classmethod
    def of(cls, messages: list[dict]) -> ChatPrompt:
        """From OpenAI-style [{"role": ..., "content": ...}] (ValueError naming a bad one)."""
        pairs = []
        for i, message in enumerate(messages):
            if not isinstance(message, dict):
                raise ValueError(f"messages[{i}]: must be an object with role and content")
            pairs.append((message.get("role"), message.get("content")))
        return cls(tuple(pairs))


class Tokenizer:
    def __init__(self, model_dir: Path) -> None:
        from transformers import AutoTokenizer

        self._tok = AutoTokenizer.from_pretrained(str(model_dir))

    def encode(self, text: str) -> list[int]:
        return list(self._tok(text)["input_ids"])

    def decode(self, token_ids: list[int]) -> str:
        return self._tok.decode(token_ids, skip_special_tokens=True)

    @property
    def has_chat_template(self) -> bool:
        return bool(getattr(self._tok, "chat_template", None))

    def chat_prompt(self, user_message: str) -> list[int]:
        """Token ids of a one-turn chat with the generation prompt appended."""
        return self.render_chat(ChatPrompt((("user", user_message),)))

    def render_chat(self, chat: ChatPrompt) -> list[int]:
        """Token ids of a conversation through the model's chat template, with the
        generation prompt appended (ValueError when the model has no template)."""
        if not self.has_chat_template:
            raise ValueError("messages: this model has no chat template; send text or token ids")
        messages = [{"role": role, "content": content} for role, content in chat.messages]
        ids = self._tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        return list(ids["input_ids"] if hasattr(ids, "keys") else ids)


def load_tokenizer(model_dir: Path) -> Tokenizer | None:
    """The directory's tokenizer, or None when it ships none (token-id prompts only)."""
    if not (model_dir / "tokenizer.json").is_file() and not (model_dir / "tokenizer.model").is_file():
        return None
    return Tokenizer(model_dir)
