"""vLLM's token endpoints on the HTTP door: `POST /tokenize` (a prompt, or chat messages
through the chat template with the generation prompt, to token ids) and `POST /detokenize`
(token ids to text), in vLLM's request and response shapes. Both run off the engine thread
(`server.prompts`) and take the same bearer token as the other endpoints."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import Request
from pydantic import BaseModel, ConfigDict, Field

from engine import ChatPrompt
from server.prompts import PromptTokenizer


class TokenizeRequest(BaseModel):
    """Exactly one of `prompt` and `messages`. A chat always gets its generation prompt
    (`add_generation_prompt` false is refused: the engine renders chats one way)."""

    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    prompt: str | None = None
    messages: list[dict[str, Any]] | None = None
    add_generation_prompt: bool = True
    return_token_strs: bool = False

    def prompt_value(self) -> str | ChatPrompt:
        """The text or chat to tokenize; ValueError naming the field that is wrong."""
        if (self.prompt is None) == (self.messages is None):
            raise ValueError("prompt: send exactly one of prompt and messages")
        if self.prompt is not None:
            return self.prompt
        if not self.add_generation_prompt:
            raise ValueError("add_generation_prompt: only true is supported (chats are "
                             "rendered with the generation prompt)")
        return ChatPrompt.of(self.messages, None)


class DetokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    tokens: list[int] = Field(min_length=1)


def tokenize_response(token_ids: list[int], max_model_len: int,
                      token_strs: list[str] | None) -> dict[str, Any]:
    """vLLM's /tokenize answer."""
    answer: dict[str, Any] = {"count": len(token_ids), "max_model_len": max_model_len,
                              "tokens": token_ids}
    if token_strs is not None:
        answer["token_strs"] = token_strs
    return answer


class TokenEndpoints:
    """The two handlers. `authenticate(request)` raises the door's 401, `check_model(name)`
    its 404, `http_error(exc)` turns a ValueError into the door's 400 naming the field."""

    def __init__(self, prompts: PromptTokenizer, max_model_len: int,
                 authenticate: Callable[[Request], Any], check_model: Callable[[str | None], None],
                 http_error: Callable[[Exception], Exception]) -> None:
        self.prompts = prompts
        self.max_model_len = max_model_len
        self._authenticate, self._check_model = authenticate, check_model
        self._http_error = http_error

    async def tokenize(self, request: Request, body: TokenizeRequest) -> dict[str, Any]:
        self._authenticate(request)
        self._check_model(body.model)
        try:
            token_ids = await self.prompts.token_ids(body.prompt_value())
        except ValueError as exc:
            raise self._http_error(exc) from None
        strs = None
        if body.return_token_strs:
            texts = await self.prompts.token_texts(token_ids)
            strs = [texts[t] for t in token_ids]
        return tokenize_response(token_ids, self.max_model_len, strs)

    async def detokenize(self, request: Request, body: DetokenizeRequest) -> dict[str, Any]:
        self._authenticate(request)
        self._check_model(body.model)
        try:
            return {"prompt": await self.prompts.text(body.tokens)}
        except ValueError as exc:
            raise self._http_error(exc) from None
