"""OpenAI's `echo` on /v1/completions, as vLLM serves it: each choice's text is its prompt's
text followed by the output, and with `logprobs` its logprobs arrays start with the prompt's
tokens (the first with a null logprob: nothing predicts it). `max_tokens` 0 returns the
prompt alone, scored: the engine makes one token (it cannot make none), which is dropped
from the text, the token ids, the logprobs and the usage.

A prompt's text is the string the client sent, or its token ids decoded.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from engine import CompletionOutput
from engine.logprobs import TokenLogprob
from server.openai_logprobs import completion_logprobs, joined, prompt_logprobs, token_ids_of
from server.openai_protocol import CompletionRequest
from server.prompts import PromptTokenizer


@dataclass(frozen=True)
class Echo:
    """One request's echo: `texts[i]` is choice i's prompt text; `only`: nothing generated
    is returned (`max_tokens` 0)."""

    texts: list[str]
    only: bool

    @classmethod
    async def of(cls, body, prompts: PromptTokenizer) -> Echo | None:
        """A request's echo (None: not a completions request asking for it)."""
        if not isinstance(body, CompletionRequest) or not body.echo:
            return None
        texts = []
        for prompt in body.prompt_values():
            text = prompt if isinstance(prompt, str) else await prompts.text(prompt)
            texts += [text] * body.n
        return cls(texts, body.echo_only())

    def completion(self, completion: CompletionOutput) -> CompletionOutput:
        """The completion as the client sees it: without its output when `only`."""
        if not self.only:
            return completion
        return replace(completion, token_ids=[], text="", finish_reason="length",
                       logprobs=None if completion.logprobs is None else [])


async def prompt_arrays(prompts: PromptTokenizer, prompt_ids: list[int],
                        entries: list[TokenLogprob | None]) -> dict[str, Any]:
    """An echoed prompt's legacy logprobs arrays (`openai_logprobs.prompt_logprobs`)."""
    texts = await prompts.token_texts(
        set(prompt_ids) | token_ids_of(e for e in entries if e is not None))
    return prompt_logprobs(prompt_ids, entries, texts)


async def echoed_logprobs(prompts: PromptTokenizer, completion: CompletionOutput
                          ) -> dict[str, Any] | None:
    """A whole echoed choice's arrays: its prompt's, then its output's (None: not asked)."""
    if completion.prompt_logprobs is None:
        return None
    prompt = await prompt_arrays(prompts, completion.prompt_token_ids,
                                 completion.prompt_logprobs)
    generated = completion.logprobs or []
    texts = await prompts.token_texts(token_ids_of(generated))
    offset = sum(len(token) for token in prompt["tokens"])
    return joined(prompt, completion_logprobs(generated, texts, offset))
