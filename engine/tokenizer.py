"""Text <-> token ids, and chat prompts, through the model directory's HF tokenizer."""

from __future__ import annotations

from pathlib import Path

from engine.chat_prompt import ChatPrompt


class Tokenizer:
    def __init__(self, model_dir: Path) -> None:
        from transformers import AutoTokenizer

        self._tok = AutoTokenizer.from_pretrained(str(model_dir))
        self._chat_template: str | None = None  # None: the model's own

    def use_chat_template(self, template: str) -> None:
        """Render chats with `template` (Jinja text) instead of the model's own."""
        self._chat_template = template

    @property
    def hf_tokenizer(self):
        """The transformers tokenizer itself (for libraries that read its vocabulary)."""
        return self._tok

    def encode(self, text: str) -> list[int]:
        return list(self._tok(text)["input_ids"])

    def decode(self, token_ids: list[int]) -> str:
        return self._tok.decode(token_ids, skip_special_tokens=True)

    @property
    def has_chat_template(self) -> bool:
        return bool(self._chat_template or getattr(self._tok, "chat_template", None))

    def chat_prompt(self, user_message: str) -> list[int]:
        """Token ids of a one-turn chat with the generation prompt appended."""
        return self.render_chat(ChatPrompt((("user", user_message),)))

    def render_chat(self, chat: ChatPrompt) -> list[int]:
        """Token ids of a conversation through the model's chat template, with the
        generation prompt appended and the chat's extra template variables (ValueError when
        the model has no template)."""
        if not self.has_chat_template:
            raise ValueError("messages: this model has no chat template; send text or token ids")
        ids = self._tok.apply_chat_template(
            chat.template_messages(), tools=[dict(t) for t in chat.tools] or None,
            chat_template=self._chat_template, add_generation_prompt=True, tokenize=True,
            **chat.template_kwargs)
        return list(ids["input_ids"] if hasattr(ids, "keys") else ids)


def load_tokenizer(model_dir: Path) -> Tokenizer | None:
    """The directory's tokenizer, or None when it ships none (token-id prompts only)."""
    if not (model_dir / "tokenizer.json").is_file() and not (model_dir / "tokenizer.model").is_file():
        return None
    return Tokenizer(model_dir)
