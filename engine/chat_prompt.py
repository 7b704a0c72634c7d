"""A conversation to render with a model's chat template: messages, the tools the model may
call (OpenAI's shapes) and extra template variables, checked and bounded before anything is
rendered."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

CHAT_ROLES = frozenset({"system", "user", "assistant", "tool", "developer"})
MAX_TOOLS = 128
MAX_TOOL_CALLS = 64  # per assistant message
MAX_TEMPLATE_KWARGS_BYTES = 16 << 10  # `chat_template_kwargs` as JSON
# What the server passes to the template itself, and the arguments of transformers'
# `apply_chat_template` (tests/engine pins them): never a request's.
RESERVED_TEMPLATE_KWARGS = frozenset({
    "messages", "conversation", "tools", "documents", "chat_template", "add_generation_prompt",
    "continue_final_message", "tokenize", "sanitize_control_tokens", "padding", "truncation",
    "max_length", "return_tensors", "return_dict", "return_assistant_tokens_mask",
    "tokenizer_kwargs"})


@dataclass(frozen=True)
class ChatPrompt:
    """Messages as (role, content) pairs, and per message (when any) the tool fields a
    template renders: an assistant's `tool_calls` (each `{"id", "type": "function",
    "function": {"name", "arguments"}}`, arguments a dict once parsed from OpenAI's JSON
    text), a tool result's `tool_call_id` and `name`. `tools` are the function tools offered
    (OpenAI's `{"type": "function", "function": {...}}`), passed to the template as they are.
    An assistant message may carry its `reasoning_content` (vLLM's field; a Responses
    reasoning item), which the template renders or drops as it does past reasoning (Qwen3's
    keeps the reasoning of the turns after the last user message). `template_kwargs` are
    extra template variables (vLLM's `chat_template_kwargs`, e.g. Qwen3's
    `enable_thinking`): JSON values, at most MAX_TEMPLATE_KWARGS_BYTES as JSON, none named
    in RESERVED_TEMPLATE_KWARGS. The engine renders it with the generation prompt appended."""

    messages: tuple[tuple[str, str], ...]
    fields: tuple[Mapping[str, Any] | None, ...] = ()
    tools: tuple[Mapping[str, Any], ...] = ()
    template_kwargs: Mapping[str, Any] = field(default_factory=dict)

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
        if self.fields and len(self.fields) != len(self.messages):
            raise ValueError(f"fields: {len(self.fields)} entries for "
                             f"{len(self.messages)} messages")
        if len(self.tools) > MAX_TOOLS:
            raise ValueError(f"tools: at most {MAX_TOOLS}, got {len(self.tools)}")
        _check_template_kwargs(self.template_kwargs)

    @classmethod
    def of(cls, messages: Sequence[Any], tools: Sequence[Any] | None = None,
           template_kwargs: Mapping[str, Any] | None = None) -> ChatPrompt:
        """From OpenAI-style messages (content a string, null, or a list of text parts; an
        assistant's `tool_calls` and `reasoning_content`, a tool's `tool_call_id` and
        `name`), `tools` and `template_kwargs`; ValueError naming the first bad field."""
        pairs, fields = [], []
        for i, message in enumerate(messages):
            if not isinstance(message, dict):
                raise ValueError(f"messages[{i}]: must be an object with role and content")
            role = message.get("role")
            pairs.append((role, _content(message.get("content"), role, i)))
            fields.append(_fields(message, i))
        return cls(tuple(pairs), tuple(fields) if any(fields) else (),
                   tuple(_tool(t, i) for i, t in enumerate(tools or ())),
                   {} if template_kwargs is None else template_kwargs)

    def template_messages(self) -> list[dict[str, Any]]:
        """The messages as a chat template reads them."""
        fields = self.fields or (None,) * len(self.messages)
        return [{"role": role, "content": content, **(extra or {})}
                for (role, content), extra in zip(self.messages, fields)]


def _content(content: Any, role: Any, i: int) -> Any:
    """A message's content as text: a list of text parts is joined; an assistant's may be
    null (a turn of tool calls only), read as empty."""
    if content is None:
        if role != "assistant":
            raise ValueError(f"messages[{i}].content: required (only an assistant's may be "
                             f"null)")
        return ""
    if isinstance(content, list):
        if any(not isinstance(p, dict) or p.get("type") != "text" for p in content):
            raise ValueError(f"messages[{i}].content: only text parts are supported")
        return "".join(str(p.get("text", "")) for p in content)
    return content


def _check_template_kwargs(kwargs: Any) -> None:
    if not isinstance(kwargs, Mapping):
        raise ValueError("chat_template_kwargs: must be an object")
    for key in kwargs:
        if key in RESERVED_TEMPLATE_KWARGS:
            raise ValueError(f"chat_template_kwargs.{key}: set by the server, not by a request")
    try:
        size = len(json.dumps(dict(kwargs)).encode("utf-8", "surrogatepass"))
    except (TypeError, ValueError):
        raise ValueError("chat_template_kwargs: must hold JSON values") from None
    if size > MAX_TEMPLATE_KWARGS_BYTES:
        raise ValueError(f"chat_template_kwargs: {size} bytes as JSON exceed the limit of "
                         f"{MAX_TEMPLATE_KWARGS_BYTES}")


def _fields(message: dict, i: int) -> dict[str, Any] | None:
    """The fields a template renders beside a message's role and content."""
    extra: dict[str, Any] = {}
    for key in ("tool_call_id", "name"):
        value = message.get(key)
        if value is not None:
            if not isinstance(value, str) or len(value) > 256:
                raise ValueError(f"messages[{i}].{key}: must be a string of at most 256 "
                                 f"characters")
            extra[key] = value
    reasoning = message.get("reasoning_content")
    if reasoning is not None:
        if message.get("role") != "assistant" or not isinstance(reasoning, str):
            raise ValueError(f"messages[{i}].reasoning_content: only an assistant message "
                             f"has it, as a string")
        extra["reasoning_content"] = reasoning
    calls = message.get("tool_calls")
    if calls:
        if message.get("role") != "assistant":
            raise ValueError(f"messages[{i}].tool_calls: only an assistant message has them")
        if not isinstance(calls, list) or len(calls) > MAX_TOOL_CALLS:
            raise ValueError(f"messages[{i}].tool_calls: must be a list of at most "
                             f"{MAX_TOOL_CALLS} calls")
        extra["tool_calls"] = [_tool_call(call, f"messages[{i}].tool_calls[{j}]")
                               for j, call in enumerate(calls)]
    return extra or None


def _tool_call(call: Any, where: str) -> dict[str, Any]:
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise ValueError(f"{where}: must be {{'type': 'function', 'function': {{'name': ..., "
                         f"'arguments': ...}}}}")
    arguments = function.get("arguments", "{}")
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments or "{}")
        except json.JSONDecodeError:
            raise ValueError(f"{where}.function.arguments: must be JSON text") from None
    return {"id": call.get("id"), "type": "function",
            "function": {"name": function["name"], "arguments": arguments}}


def _tool(tool: Any, i: int) -> Mapping[str, Any]:
    if not isinstance(tool, dict) or tool.get("type", "function") != "function":
        raise ValueError(f"tools[{i}]: only function tools ({{'type': 'function', ...}}) are "
                         f"supported")
    function = tool.get("function")
    if not isinstance(function, dict) or not isinstance(function.get("name"), str) \
            or not function["name"]:
        raise ValueError(f"tools[{i}].function.name: must be a non-empty string")
    return tool
