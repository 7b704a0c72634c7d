"""OpenAI's `echo` on /v1/completions, as vLLM serves it: each choice's text is its prompt's
text followed by the output, and with `logprobs` its logprobs arrays start with the prompt's
tokens (the first with a null logprob: nothing predicts it). `max_tokens` 0 returns the
prompt alone, scored: the engine makes one token (it cannot make none), which is dropped
from the text, the token ids, the logprobs and the usage.

A prompt's text is the string the client sent, or its token ids decoded.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from engine import CompletionOutput


@dataclass(frozen=True)
class Echo:
    """One request's echo: `texts[i]` is choice i's prompt text; `only`: nothing generated
    is returned (`max_tokens` 0)."""

    texts: list[str]
    only: bool

    def completion(self, completion: CompletionOutput) -> CompletionOutput:
        """The completion as the client sees it: without its output when `only`."""
        if not self.only:
            return completion
        return replace(completion, token_ids=[], text="", finish_reason="length",
                       logprobs=None if completion.logprobs is None else [])
