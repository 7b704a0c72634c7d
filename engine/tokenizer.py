"""Text <-> token ids, and chat prompts, through the model directory's HF tokenizer."""

from __future__ import annotations

from pathlib import Path


class Tokenizer:
    def __init__(self, model_dir: Path) -> None:
        from transformers import AutoTokenizer

        self._tok = AutoTokenizer.from_pretrained(str(model_dir))

    def encode(self, text: str) -> list[int]:
        return list(self._tok(text)["input_ids"])

    def decode(self, token_ids: list[int]) -> str:
        return self._tok.decode(token_ids, skip_special_tokens=True)

    def chat_prompt(self, user_message: str) -> list[int]:
        """Token ids of a one-turn chat with the generation prompt appended."""
        messages = [{"role": "user", "content": user_message}]
        ids = self._tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        return list(ids["input_ids"] if hasattr(ids, "keys") else ids)


def load_tokenizer(model_dir: Path) -> Tokenizer | None:
    """The directory's tokenizer, or None when it ships none (token-id prompts only)."""
    if not (model_dir / "tokenizer.json").is_file() and not (model_dir / "tokenizer.model").is_file():
        return None
    return Tokenizer(model_dir)
