"""The OpenAI wire format: request bodies (pydantic), their engine values, and responses.

Requests accept the OpenAI fields this engine can honour, plus the usual extras of open
servers (`top_k`, `ignore_eos`, `return_token_ids`) and Agentix's own (`program_id`,
`program_class`, `thread_id`, `expected_tool_seconds`, `ttft_slo_seconds`) and chat's
`chat_template_kwargs` (vLLM's: extra chat-template variables, `engine.chat_prompt`); other
unknown fields are ignored, as OpenAI clients send many. `logprobs` (chat: a bool with
`top_logprobs` 0-20, which above 0 needs it; completions: 0-5 alternatives) returns each
generated token's logprob (`server.openai_logprobs`); completions' `echo` returns the prompt
before the output, with its tokens' logprobs too when asked (`server.openai_echo`;
`max_tokens` 0 then scores the prompt alone). `response_format` (json_object, json_schema)
and a forced `tool_choice` ("required", a named function) are enforced by constrained
decoding (`server.openai_structured`). Fields it cannot honour (`best_of`, `suffix`, a
penalty, `logit_bias`, `min_p`, `min_tokens`) are refused at any value but their neutral one
with a 400 naming them, never dropped in silence. Sampling defaults follow OpenAI:
temperature 1, top_p 1; `max_tokens` defaults to 16 on /v1/completions and to the rest of
the context on chat.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from engine import ChatPrompt, CompletionOutput, SamplingParams
from engine.structured.spec import StructuredOutput
from server.chat_output import ChatOutput
from server.openai_structured import forced_function, format_output
from server.tool_parsers.forced import forced_output

MAX_CHOICES = 16
MAX_CALLS = 64  # calls per request: batched prompts x n
COMPLETIONS_DEFAULT_MAX_TOKENS = 16


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float = Field(default=1.0, ge=0.0, le=2.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    top_k: int = Field(default=0, ge=0)
    seed: int | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] = Field(default_factory=list)
    ignore_eos: bool = False
    n: int = Field(default=1, ge=1, le=MAX_CHOICES)
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    return_token_ids: bool = False
    program_id: str | None = None
    program_class: str | None = None  # of a program this request starts
    thread_id: str | None = None
    expected_tool_seconds: float | None = None
    ttft_slo_seconds: float | None = None  # first-token deadline (scheduler.deadlines)
    # Accepted only at their "off" values (see the module docstring).
    best_of: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    min_p: float | None = None
    min_tokens: int | None = None

    def unsupported(self) -> str | None:
        """The first field set to a value this engine cannot honour, or None."""
        for name, off in (("best_of", 1), ("presence_penalty", 0), ("frequency_penalty", 0),
                          ("repetition_penalty", 1), ("min_p", 0), ("min_tokens", 0)):
            if getattr(self, name) not in (None, off):
                return name
        if self.logit_bias:
            return "logit_bias"
        return None

    def logprobs_wanted(self) -> int | None:
        """How many top alternatives each token's logprobs carry (None: no logprobs)."""
        return None

    def stops(self) -> tuple[str, ...]:
        """A string or a list; SamplingParams bounds them (engine/sampling_params.py)."""
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop or ())

    def include_usage(self) -> bool:
        return bool((self.stream_options or {}).get("include_usage"))

    def structured_output(self) -> StructuredOutput | None:
        """The output's grammar (None: free text); ValueError naming a malformed field."""
        return None

    def grammar_field(self) -> str:
        """The request field that asked for the output's grammar (what a grammar the engine
        cannot compile, or a model that cannot be constrained, is reported against)."""
        return "json_schema"

    def sampling_params(self, max_tokens: int) -> SamplingParams:
        """The engine's parameters for choice 0 (`for_choice` derives the others);
        ValueError naming a malformed field."""
        return SamplingParams(temperature=self.temperature, top_p=self.top_p, top_k=self.top_k,
                              seed=self.seed, max_tokens=max_tokens, stop=self.stops(),
                              stop_token_ids=tuple(self.stop_token_ids),
                              ignore_eos=self.ignore_eos, logprobs=self.logprobs_wanted(),
                              structured=self.structured_output())


class ChatCompletionRequest(_Body):
    # Where a json_schema format's schema came from (the Responses API sets its own).
    _schema_field: str = PrivateAttr("response_format.json_schema.schema")

    messages: list[dict[str, Any]] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = None
    parallel_tool_calls: bool = True
    response_format: dict[str, Any] | None = None
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    chat_template_kwargs: dict[str, Any] | None = None  # vLLM's: extra template variables

    def logprobs_wanted(self) -> int | None:
        """`top_logprobs` alternatives with `logprobs` true; ValueError naming
        `top_logprobs` when it asks for alternatives without it (0 or null is accepted, as
        on vLLM)."""
        if self.top_logprobs and not self.logprobs:
            raise ValueError(f"top_logprobs: {self.top_logprobs} alternatives need logprobs: "
                             f"true")
        return (self.top_logprobs or 0) if self.logprobs else None

    def forced_tool(self) -> tuple[bool, str | None]:
        """(forced, function) of `tool_choice` (`openai_structured.forced_function`)."""
        return forced_function(self.tool_choice, self.tools)

    def structured_output(self) -> StructuredOutput | None:
        """A forced tool call's grammar (it wins over `response_format`), else
        `response_format`'s, else None."""
        forced, function = self.forced_tool()
        if forced:
            return forced_output(self.tools, function, self.parallel_tool_calls)
        return format_output(self.response_format, "response_format")

    def schema_named(self, field: str) -> ChatCompletionRequest:
        """This request, reporting a json_schema format's schema as `field` (the Responses
        API's `text.format.schema`)."""
        self._schema_field = field
        return self

    def grammar_field(self) -> str:
        if self.forced_tool()[0]:
            return "tool_choice"
        if (self.response_format or {}).get("type") == "json_schema":
            return self._schema_field
        return "response_format"

    def parses_tool_calls(self) -> bool:
        """Whether the output is parsed into tool calls by the server's parser: tools
        offered, choice "auto" (a forced choice has its own parser)."""
        return bool(self.tools) and self.tool_choice in (None, "auto")

    def chat(self) -> ChatPrompt:
        """The messages as a ChatPrompt, with the tools unless `tool_choice` is "none" (then
        the model is not shown them) and `chat_template_kwargs` (bounded: `ChatPrompt`)."""
        return ChatPrompt.of(self.messages, None if self.tool_choice == "none" else self.tools,
                             self.chat_template_kwargs)

    def requested_max_tokens(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens


class CompletionRequest(_Body):
    prompt: str | list[int] | list[str] | list[list[int]]
    max_tokens: int | None = Field(default=None, ge=0)  # 0: with echo only
    echo: bool = False
    suffix: str | None = None
    logprobs: int | None = Field(default=None, ge=0, le=5)

    def logprobs_wanted(self) -> int | None:
        return self.logprobs

    def unsupported(self) -> str | None:
        if self.suffix:
            return "suffix"
        return super().unsupported()

    def echo_only(self) -> bool:
        """`echo` with `max_tokens` 0: the prompt alone, scored (the engine still makes one
        token, which is dropped)."""
        return self.echo and self.max_tokens == 0

    def sampling_params(self, max_tokens: int) -> SamplingParams:
        """With `echo` and `logprobs`, the prompt's logprobs too; ValueError naming
        `max_tokens` for 0 without `echo`."""
        if self.max_tokens == 0 and not self.echo:
            raise ValueError("max_tokens: 0 only with echo (the prompt alone, scored)")
        prompt_logprobs = self.logprobs if self.echo else None
        return replace(super().sampling_params(max_tokens), prompt_logprobs=prompt_logprobs)

    def prompt_values(self) -> list[str | list[int]]:
        """The prompts: one string or token-id list, or a batch of either (a list of
        strings, or of id lists). Each gets `n` choices, prompt i's at indexes i*n to
        i*n+n-1, as on vLLM; ValueError naming `prompt` past MAX_CALLS calls in all."""
        prompt = self.prompt
        batch = isinstance(prompt, list) and bool(prompt) and \
            all(isinstance(p, (str, list)) for p in prompt)
        prompts = list(prompt) if batch else [prompt]
        if len(prompts) * self.n > MAX_CALLS:
            raise ValueError(f"prompt: {len(prompts)} prompts x n = {self.n} exceed "
                             f"{MAX_CALLS} calls per request")
        return prompts

    def requested_max_tokens(self) -> int | None:
        if self.max_tokens is None:
            return COMPLETIONS_DEFAULT_MAX_TOKENS
        return max(self.max_tokens, 1)  # 0 (echo only): one token, dropped


def for_choice(params: SamplingParams, index: int) -> SamplingParams:
    """Choice `index`'s parameters: a seeded request gets seed + index, so the n samples
    differ and each is reproducible."""
    if index == 0 or params.seed is None:
        return params
    return replace(params, seed=params.seed + index)


def usage(completions: list[CompletionOutput], n: int) -> dict[str, Any]:
    """OpenAI usage of one request's choices, `n` per prompt (prompt i's are i*n to
    i*n+n-1), counted as vLLM does: each prompt's tokens and cached tokens once (its first
    choice's), every choice's generated tokens; with the engine's queue and service seconds
    as extras (the slowest choice's queue, all choices' service)."""
    firsts = completions[::n]
    generated = sum(len(c.token_ids) for c in completions)
    prompt = sum(len(c.prompt_token_ids) for c in firsts)
    return {"prompt_tokens": prompt, "completion_tokens": generated,
            "total_tokens": prompt + generated,
            "prompt_tokens_details": {"cached_tokens": sum(c.num_cached_tokens
                                                           for c in firsts)},
            "queue_seconds": max(c.queue_seconds for c in completions),
            "service_seconds": sum(c.service_seconds for c in completions)}


def chat_choice(index: int, completion: CompletionOutput, token_ids: bool,
                parsed: ChatOutput | None = None,
                logprobs: dict[str, Any] | None = None) -> dict[str, Any]:
    """One choice of a chat response; with `parsed` (its output through the request's
    parsers), the message carries the content part, the reasoning as `reasoning_content`
    (when there is any) and the tool calls, finishing with "tool_calls" when it has any."""
    message: dict[str, Any] = {"role": "assistant", "content": completion.text}
    finish_reason = completion.finish_reason
    if parsed is not None:
        message["content"] = parsed.content
        if parsed.reasoning is not None:
            message["reasoning_content"] = parsed.reasoning
        if parsed.tool_calls:
            message["tool_calls"] = [call.to_openai() for call in parsed.tool_calls]
            finish_reason = tool_calls_finish(finish_reason)
    choice = {"index": index, "message": message, "finish_reason": finish_reason,
              "logprobs": logprobs}
    if token_ids:
        choice["token_ids"] = list(completion.token_ids)
    return choice


def tool_calls_finish(finish_reason: str | None) -> str | None:
    """A finish reason once the output made tool calls: a natural stop becomes
    "tool_calls"; a cut one (length, abort) stays what it was."""
    return "tool_calls" if finish_reason == "stop" else finish_reason


def text_choice(index: int, completion: CompletionOutput, token_ids: bool,
                logprobs: dict[str, Any] | None = None, echo: str = "") -> dict[str, Any]:
    """One choice of a completions response, its text after `echo` (the echoed prompt)."""
    choice = {"index": index, "text": echo + completion.text,
              "finish_reason": completion.finish_reason, "logprobs": logprobs}
    if token_ids:
        choice["token_ids"] = list(completion.token_ids)
    return choice


def envelope(kind: Literal["chat.completion", "chat.completion.chunk", "text_completion"],
             response_id: str, model: str, created: int, choices: list[dict[str, Any]],
             **extra: Any) -> dict[str, Any]:
    return {"id": response_id, "object": kind, "created": created, "model": model,
            "choices": choices, **extra}


def chunk_delta(kind: str, index: int, text: str, token_ids: list[int] | None,
                finish_reason: str | None, role: bool = False,
                logprobs: dict[str, Any] | None = None) -> dict[str, Any]:
    """One choice of a streamed chunk: chat chunks carry a `delta`, completions `text`."""
    if kind == "chat.completion.chunk":
        delta: dict[str, Any] = {"role": "assistant", "content": text} if role else {
            "content": text}
        choice = {"index": index, "delta": delta if (text or role) else {},
                  "finish_reason": finish_reason, "logprobs": logprobs}
    else:
        choice = {"index": index, "text": text, "finish_reason": finish_reason,
                  "logprobs": logprobs}
    if token_ids is not None:
        choice["token_ids"] = token_ids
    return choice


def fragment_chunk(index: int, fragment: dict[str, Any], token_ids: list[int] | None,
                   logprobs: dict[str, Any] | None = None) -> dict[str, Any]:
    """One choice of a streamed chat chunk whose delta is a tool parser's fragment."""
    choice = {"index": index, "delta": fragment, "finish_reason": None, "logprobs": logprobs}
    if token_ids is not None:
        choice["token_ids"] = token_ids
    return choice


def now_seconds() -> int:
    return int(time.time())
