"""TextCodec: a model's text side without its weights: prompts to checked token ids, ids to
text, and output grammars compiled for its vocabulary.

The engine has one; so has a router that serves the OpenAI door in front of replicas
(it loads only the tokenizer). Every method is safe from any thread: it reads only what
is fixed at construction, and the grammar cache takes its own lock.
"""

from __future__ import annotations

import threading
from typing import Iterable, Sequence

from engine.chat_prompt import ChatPrompt
from engine.structured.compiler import GrammarCompiler
from engine.structured.spec import StructuredOutput
from engine.structured.state import GrammarState
from engine.tokenizer import Tokenizer

Prompt = str | Sequence[int] | ChatPrompt


class TextCodec:
    """`tokenizer` None: token-id prompts only (texts are their ids, nothing to decode or
    constrain with); `max_model_len` bounds a prompt (it must leave room for a token)."""

    def __init__(self, tokenizer: Tokenizer | None, vocab_size: int, max_model_len: int
                 ) -> None:
        self.tokenizer = tokenizer
        self.vocab_size = vocab_size
        self.max_model_len = max_model_len
        self._grammars: GrammarCompiler | None = None  # made at the first constrained call
        self._grammars_refused: str | None = None  # why it cannot be made, once known
        self._grammars_lock = threading.Lock()

    def tokenize_prompt(self, prompt: Prompt) -> list[int]:
        """The prompt's token ids, or a ValueError naming `prompt`: a text or chat without a
        tokenizer, empty, too long for the context, an id outside the vocabulary."""
        if isinstance(prompt, (str, ChatPrompt)) and self.tokenizer is None:
            raise ValueError("prompt: text and chat prompts need a tokenizer (this model has "
                             "none)")
        if isinstance(prompt, str):
            token_ids = self.tokenizer.encode(prompt)
        elif isinstance(prompt, ChatPrompt):
            token_ids = self.tokenizer.render_chat(prompt)
        else:
            token_ids = list(prompt)
        if not token_ids:
            raise ValueError("prompt: must not be empty")
        if len(token_ids) >= self.max_model_len:
            raise ValueError(f"prompt: {len(token_ids)} tokens leaves no room to generate in "
                             f"the model's context of {self.max_model_len}")
        # Passes in C for the common case (a sum of ints and bools is an int; any other
        # element makes it another type or raises); the per-token scan only to name a bad id.
        if not _all_ints(token_ids) or min(token_ids) < 0 or max(token_ids) >= self.vocab_size:
            bad = [t for t in token_ids
                   if not isinstance(t, int) or not 0 <= t < self.vocab_size]
            raise ValueError(f"prompt: token id {bad[0]!r} is outside the vocabulary "
                             f"[0, {self.vocab_size})")
        return token_ids

    def token_texts(self, token_ids: Iterable[int]) -> dict[int, str]:
        """Each id's text, decoded alone (its id as text without a tokenizer)."""
        if self.tokenizer is None:
            return {i: str(i) for i in token_ids}
        return {i: self.tokenizer.decode([i]) for i in token_ids}

    def detokenize(self, token_ids: list[int]) -> str:
        """The text of `token_ids` (special tokens skipped, as in outputs); ValueError
        naming `tokens` for an id outside the vocabulary or without a tokenizer."""
        if self.tokenizer is None:
            raise ValueError("tokens: this model has no tokenizer to decode with")
        bad = [t for t in token_ids if not isinstance(t, int) or not 0 <= t < self.vocab_size]
        if bad:
            raise ValueError(f"tokens: token id {bad[0]!r} is outside the vocabulary "
                             f"[0, {self.vocab_size})")
        return self.tokenizer.decode(token_ids)

    def grammar_state(self, spec: StructuredOutput) -> GrammarState:
        """A fresh start state of `spec`'s output grammar (compiled once, then cached);
        ValueError naming the field when there is no tokenizer or the schema cannot be
        compiled."""
        if self.tokenizer is None:
            raise ValueError("structured: constrained decoding needs a tokenizer (this model "
                             "has none)")
        with self._grammars_lock:
            if self._grammars is None and self._grammars_refused is None:
                try:
                    self._grammars = GrammarCompiler(self.tokenizer.hf_tokenizer,
                                                     self.vocab_size)
                except ValueError as exc:  # remembered: the tokenizer will not change
                    self._grammars_refused = str(exc)
        if self._grammars is None:
            raise ValueError(self._grammars_refused)
        return self._grammars.state(spec)


def _all_ints(values: Sequence[object]) -> bool:
    """Whether every one of `values` is an int (bools and other int subclasses included),
    in one pass in C."""
    try:
        return type(sum(values)) is int  # type: ignore[arg-type]
    except TypeError:
        return False
