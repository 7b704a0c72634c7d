"""OpenAI's Responses API (`POST /v1/responses`, the OpenAI Agents SDK's default) as a form of
chat: a request becomes a `ChatCompletionRequest`, its one output becomes a `response` object.

Input: a string (one user message), or a list of items: messages (`role` user, system,
developer (as system) or assistant; `content` a string or `input_text`/`output_text` parts),
`function_call` items (an assistant's tool call), `function_call_output` items (the tool's
answer) and `reasoning` items (their `reasoning_text` parts become the `reasoning_content` of
the assistant turn that follows, which the chat template renders or drops as it does past
reasoning; with no assistant item after it, it is dropped); `instructions` is a system
message first; `chat_template_kwargs` as on chat. Function tools arrive flat (`{"type":
"function", "name", "description", "parameters"}`). Output items: a `reasoning` item (with a
reasoning parser on the server, when the output has reasoning: `summary` empty, `content`
one `reasoning_text` part), a `message` with one `output_text` part (when there is text, or
nothing else but reasoning) and one `function_call` per parsed tool call (with a tool parser
on the server, as for chat); an item's id is `rs_`, `msg_` or `fc_`, the response's id and
the item's output index, streamed or not. Streaming sends the API's typed events, each with
its `sequence_number`: response.created, response.in_progress, then per output item
output_item.added, (content_part.added, reasoning_text.delta..., reasoning_text.done,
content_part.done | content_part.added, output_text.delta..., output_text.done,
content_part.done | function_call_arguments.delta... as the arguments are written,
function_call_arguments.done with them whole), output_item.done, and response.completed (or
response.incomplete when cut by length: the reasoning or a function_call that is the last
item, the one being written when the limit cut it, is then "incomplete" too, a call with its
partial arguments). Usage counts no reasoning tokens: `reasoning_tokens` is 0 for an output
without reasoning and absent for one with it (a token's text may straddle the reasoning's
end, so no exact count is at hand).

Stateful (server/response_store.py): a final response (completed or incomplete) is stored
unless `store` is false; `previous_response_id` continues one: its conversation (input
items), its output items, then the new `input` (its `instructions` are not carried over).
The response object echoes `store`, `previous_response_id` and Agentix's `program_id` (the
program it ran in; null: a one-call program). `background` and tools other than functions
are refused with a 400 naming the field, as is anything else this engine cannot honour.
`text.format` json_object and json_schema, and a forced `tool_choice`, are enforced by
constrained decoding, as on chat.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from engine import CompletionOutput
from server.chat_output import ChatOutput
from server.openai_protocol import ChatCompletionRequest
from server.openai_structured import format_output

ROLES = {"user": "user", "system": "system", "developer": "system", "assistant": "assistant"}
TEXT_PARTS = ("input_text", "output_text", "text")


class ResponsesRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    input: str | list[dict[str, Any]]
    instructions: str | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = None
    parallel_tool_calls: bool = True
    max_output_tokens: int | None = Field(default=None, ge=1)
    temperature: float = Field(default=1.0, ge=0.0, le=2.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    stream: bool = False
    text: dict[str, Any] | None = None
    previous_response_id: str | None = None
    store: bool = True
    background: bool = False
    chat_template_kwargs: dict[str, Any] | None = None  # vLLM's, as on chat
    # Agentix's own, as on chat.
    program_id: str | None = None
    program_class: str | None = None
    thread_id: str | None = None
    expected_tool_seconds: float | None = None
    ttft_slo_seconds: float | None = None

    def unsupported(self) -> str | None:
        """The first field set to a value this server cannot honour, or None."""
        if self.background:
            return "background"
        if any(tool.get("type") != "function" for tool in self.tools or ()):
            return "tools"
        return None

    def input_items(self) -> list[dict[str, Any]]:
        """`input` as items (a string is one user message)."""
        return [{"role": "user", "content": self.input}] if isinstance(self.input, str) \
            else self.input

    def to_chat(self, history: list[dict[str, Any]] | None = None) -> ChatCompletionRequest:
        """The same request as chat, `history` (the items a previous response leaves, already
        checked) before `input` (ValueError naming the first bad input item)."""
        messages = [{"role": "system", "content": self.instructions}] if self.instructions \
            else []
        turns = _Turns(messages)
        for item in history or ():
            turns.add(item, 0)
        for i, item in enumerate(self.input_items()):
            turns.add(item, i)
        if not messages:
            raise ValueError("input: must hold at least one message")
        tools = [{"type": "function", "function": {
            k: v for k, v in tool.items() if k in ("name", "description", "parameters")}}
            for tool in self.tools or ()]
        fmt = (self.text or {}).get("format")
        format_output(fmt, "text.format", nested=False)  # its errors name text.format
        if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
            fmt = {"type": "json_schema", "json_schema": fmt}
        return ChatCompletionRequest(
            model=self.model, messages=messages, tools=tools or None, response_format=fmt,
            tool_choice=self.tool_choice, parallel_tool_calls=self.parallel_tool_calls,
            max_tokens=self.max_output_tokens, temperature=self.temperature, top_p=self.top_p,
            stream=self.stream, program_id=self.program_id, program_class=self.program_class,
            thread_id=self.thread_id, expected_tool_seconds=self.expected_tool_seconds,
            ttft_slo_seconds=self.ttft_slo_seconds,
            chat_template_kwargs=self.chat_template_kwargs).schema_named("text.format.schema")


class _Turns:
    """Input items appended to chat `messages` in order; a reasoning item's text waits for
    the assistant turn the next item makes (it becomes that turn's `reasoning_content`), and
    is dropped when the next item makes none (or it has no text)."""

    def __init__(self, messages: list[dict[str, Any]]) -> None:
        self.messages = messages
        self.reasoning = ""

    def add(self, item: Any, i: int) -> None:
        """Append input item `i` (ValueError naming it when it is bad)."""
        if isinstance(item, dict) and item.get("type") == "reasoning":
            self.reasoning += _reasoning_text(item)
            return
        _add_item(self.messages, item, i)
        if self.reasoning and self.messages[-1]["role"] == "assistant":
            self.messages[-1]["reasoning_content"] = self.reasoning
        self.reasoning = ""


def _reasoning_text(item: dict[str, Any]) -> str:
    """A reasoning item's text: its `reasoning_text` parts joined (a summary is not the
    reasoning, and anything malformed is passed over: such an item is never refused)."""
    content = item.get("content")
    return "".join(part["text"] for part in content if isinstance(part, dict)
                   and part.get("type") == "reasoning_text"
                   and isinstance(part.get("text"), str)) if isinstance(content, list) else ""


def _add_item(messages: list[dict[str, Any]], item: Any, i: int) -> None:
    """Append input item `i` to the chat `messages` (consecutive function calls join one
    assistant message)."""
    if not isinstance(item, dict):
        raise ValueError(f"input[{i}]: must be an object")
    kind = item.get("type", "message")
    if kind == "message":
        role = ROLES.get(item.get("role"))
        if role is None:
            raise ValueError(f"input[{i}].role: must be one of {sorted(ROLES)}, got "
                             f"{str(item.get('role'))[:32]!r}")
        messages.append({"role": role, "content": _text(item.get("content"), i)})
    elif kind == "function_call":
        call = {"id": item.get("call_id"), "type": "function",
                "function": {"name": item.get("name"), "arguments": item.get("arguments")}}
        last = messages[-1] if messages else None
        if last is not None and last["role"] == "assistant" and last.get("tool_calls") \
                and not last["content"]:
            last["tool_calls"].append(call)
        else:
            messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
    elif kind == "function_call_output":
        output = item.get("output")
        messages.append({"role": "tool", "tool_call_id": item.get("call_id"),
                         "content": output if isinstance(output, str) else json.dumps(output)})
    else:
        raise ValueError(f"input[{i}].type: {str(kind)[:32]!r} is not supported (message, "
                         f"function_call, function_call_output, reasoning)")


def _text(content: Any, i: int) -> str | list[dict[str, str]]:
    """A message's content: a string, or its text parts as chat's text parts."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise ValueError(f"input[{i}].content: must be a string or a list of text parts")
    parts = []
    for j, part in enumerate(content):
        if not isinstance(part, dict) or part.get("type") not in TEXT_PARTS:
            raise ValueError(f"input[{i}].content[{j}]: only text parts are supported "
                             f"({', '.join(TEXT_PARTS)})")
        parts.append({"type": "text", "text": part.get("text", "")})
    return parts


def output_items(response_id: str, completion: CompletionOutput,
                 parsed: ChatOutput | None) -> list[dict[str, Any]]:
    """The response's output: the reasoning (if any), a message with the text (if any, or
    when there is no call), then the tool calls; the item the token limit cut (the
    reasoning or the last call, when nothing follows it) is "incomplete"."""
    text = completion.text if parsed is None else parsed.content
    calls = parsed.tool_calls if parsed is not None else ()
    items: list[dict[str, Any]] = []
    if parsed is not None and parsed.reasoning is not None:
        items.append(reasoning_item(output_item_id("rs", response_id, 0), parsed.reasoning,
                                    "completed" if text or calls else final_status(completion)))
    if text or not calls:
        items.append(message_item(output_item_id("msg", response_id, len(items)), text or ""))
    for call in calls:
        items.append(function_call_item(output_item_id("fc", response_id, len(items)),
                                        call.to_openai()))
    if items[-1]["type"] == "function_call":
        items[-1]["status"] = final_status(completion)
    return items


def output_item_id(prefix: str, response_id: str, output_index: int) -> str:
    """The id of a response's output item: `prefix` (rs, msg, fc), the response's id and the
    item's index in the output; unique, and the same whether the response streams or not."""
    return f"{prefix}_{response_id}_{output_index}"


def message_item(item_id: str, text: str, status: str = "completed") -> dict[str, Any]:
    return {"type": "message", "id": item_id, "status": status, "role": "assistant",
            "content": [output_text(text)] if status == "completed" else []}


def output_text(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": []}


def reasoning_item(item_id: str, text: str, status: str = "completed") -> dict[str, Any]:
    """A reasoning output item (OpenAI's shape: no summary, the text as one part; none while
    in progress)."""
    return {"type": "reasoning", "id": item_id, "summary": [],
            "content": [] if status == "in_progress" else [reasoning_text(text)],
            "status": status}


def reasoning_text(text: str) -> dict[str, Any]:
    return {"type": "reasoning_text", "text": text}


def function_call_item(item_id: str, call: dict[str, Any], status: str = "completed"
                       ) -> dict[str, Any]:
    """A function_call output item of a chat tool call (`ToolCall.to_openai()`'s shape)."""
    return {"type": "function_call", "id": item_id, "call_id": call["id"],
            "name": call["function"]["name"], "arguments": call["function"]["arguments"],
            "status": status}


def response_object(body: ResponsesRequest, response_id: str, model: str, created: int,
                    status: str, output: list[dict[str, Any]], usage: dict[str, Any] | None,
                    error: str | None = None) -> dict[str, Any]:
    """The `response` object of `body`: `status` "in_progress" while streaming, then
    "completed", "incomplete" (cut by the token limit) or "failed" (with `error`)."""
    return {"id": response_id, "object": "response", "created_at": created, "status": status,
            "incomplete_details": {"reason": "max_output_tokens"}
            if status == "incomplete" else None,
            "error": {"code": "server_error", "message": error} if error else None,
            "model": model, "instructions": body.instructions, "output": output,
            "previous_response_id": body.previous_response_id, "store": body.store,
            "program_id": body.program_id,
            "usage": usage, "parallel_tool_calls": body.parallel_tool_calls,
            "tool_choice": body.tool_choice or "auto", "tools": body.tools or [],
            "max_output_tokens": body.max_output_tokens, "temperature": body.temperature,
            "top_p": body.top_p}


def final_status(completion: CompletionOutput) -> str:
    """completed, or incomplete when the token limit cut the output."""
    return "incomplete" if completion.finish_reason == "length" else "completed"


class ResponseEvents:
    """The streamed events of one response (see the module docstring), as SSE strings:
    `start()`, then `fragment()` for each piece of output (a chat delta:
    {"reasoning_content": text}, {"content": text} or a tool parser's {"tool_calls": [...]}
    opening a call or adding to its arguments), then `finish(completion)` or
    `fail(message)`; `final` is the response object of the event `finish` ends with (None
    before)."""

    def __init__(self, body: ResponsesRequest, response_id: str, model: str,
                 created: int) -> None:
        self.body, self.response_id, self.model, self.created = body, response_id, model, created
        self.sequence = 0
        self.output: list[dict[str, Any]] = []   # items done
        self.open: dict[str, Any] | None = None  # the item being streamed
        self.text = ""                          # the open item's text or arguments
        self.final: dict[str, Any] | None = None

    def _event(self, kind: str, **fields: Any) -> str:
        payload = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return f"event: {kind}\ndata: {json.dumps(payload)}\n\n"

    def _response(self, status: str, usage: dict[str, Any] | None = None,
                  error: str | None = None) -> dict[str, Any]:
        return response_object(self.body, self.response_id, self.model, self.created, status,
                               list(self.output), usage, error)

    def start(self) -> list[str]:
        response = self._response("in_progress")
        return [self._event("response.created", response=response),
                self._event("response.in_progress", response=response)]

    def fragment(self, fragment: dict[str, Any]) -> list[str]:
        events: list[str] = []
        if fragment.get("reasoning_content"):
            events += self._text("reasoning", fragment["reasoning_content"])
        if fragment.get("content"):
            events += self._text("message", fragment["content"])
        for call in fragment.get("tool_calls") or ():
            function = call.get("function") or {}
            if "id" in call:  # a new call opens
                events += self._close()
                self.open = function_call_item(
                    output_item_id("fc", self.response_id, len(self.output)),
                    {"id": call["id"], "function": {"name": function.get("name"),
                                                    "arguments": ""}}, "in_progress")
                events.append(self._added())
            if function.get("arguments"):
                self.text += function["arguments"]
                events.append(self._event("response.function_call_arguments.delta",
                                          **self._where(), delta=function["arguments"]))
        return events

    def _text(self, kind: str, text: str) -> list[str]:
        """More `text` of the open item of `kind` (reasoning or message), opened first when
        another (or none) is open."""
        events: list[str] = []
        if self.open is None or self.open["type"] != kind:
            events += self._close() + (self._open_reasoning() if kind == "reasoning"
                                       else self._open_message())
        self.text += text
        events.append(self._event("response.reasoning_text.delta" if kind == "reasoning"
                                  else "response.output_text.delta", **self._where(),
                                  content_index=0, delta=text))
        return events

    def finish(self, completion: CompletionOutput) -> list[str]:
        status = final_status(completion)
        events = self._close(status)
        if all(item["type"] == "reasoning" for item in self.output):  # still one message
            events += self._open_message() + self._close()
        reasoned = any(item["type"] == "reasoning" for item in self.output)
        self.final = self._response(status, response_usage(completion, reasoned))
        return events + [self._event(f"response.{status}", response=self.final)]

    def fail(self, message: str) -> list[str]:
        return self._close() + [self._event("response.failed", response=self._response(
            "failed", error=message))]

    def _open_reasoning(self) -> list[str]:
        return self._open_with_part(reasoning_item(
            output_item_id("rs", self.response_id, len(self.output)), "", "in_progress"),
            reasoning_text(""))

    def _open_message(self) -> list[str]:
        return self._open_with_part(message_item(
            output_item_id("msg", self.response_id, len(self.output)), "", "in_progress"),
            output_text(""))

    def _open_with_part(self, item: dict[str, Any], part: dict[str, Any]) -> list[str]:
        """Open `item` with its one (empty) content part."""
        self.open = item
        return [self._added(), self._event("response.content_part.added", **self._where(),
                                           content_index=0, part=part)]

    def _where(self) -> dict[str, Any]:
        return {"item_id": self.open["id"], "output_index": len(self.output)}

    def _added(self) -> str:
        return self._event("response.output_item.added", output_index=len(self.output),
                           item=dict(self.open))

    def _close(self, call_status: str = "completed") -> list[str]:
        """Finish the open item (if any): its done events, then it joins the output; a
        function call's or the reasoning's status is `call_status` (incomplete: the token
        limit cut it)."""
        if self.open is None:
            return []
        item, where, text = self.open, self._where(), self.text
        if item["type"] == "reasoning":
            done = reasoning_item(item["id"], text, call_status)
            events = [self._event("response.reasoning_text.done", **where, content_index=0,
                                  text=text),
                      self._event("response.content_part.done", **where, content_index=0,
                                  part=reasoning_text(text))]
        elif item["type"] == "message":
            done = message_item(item["id"], text)
            events = [self._event("response.output_text.done", **where, content_index=0,
                                  text=text),
                      self._event("response.content_part.done", **where, content_index=0,
                                  part=output_text(text))]
        else:
            done = {**item, "arguments": text, "status": call_status}
            events = [self._event("response.function_call_arguments.done", **where,
                                  arguments=text)]
        events.append(self._event("response.output_item.done", output_index=where[
            "output_index"], item=done))
        self.output.append(done)
        self.open, self.text = None, ""
        return events


def response_usage(completion: CompletionOutput, reasoned: bool = False) -> dict[str, Any]:
    """The response's usage; `reasoned`: its output has reasoning, whose tokens are not
    counted (no `reasoning_tokens`; see the module docstring)."""
    prompt, generated = len(completion.prompt_token_ids), len(completion.token_ids)
    return {"input_tokens": prompt,
            "input_tokens_details": {"cached_tokens": completion.num_cached_tokens},
            "output_tokens": generated,
            "output_tokens_details": {} if reasoned else {"reasoning_tokens": 0},
            "total_tokens": prompt + generated}
