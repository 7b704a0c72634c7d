"""Conversions between the wire messages (agentix.v1) and the engine's types.

Request fields become engine values with proto3 defaults filled in (unset `top_p` -> 1.0,
unset `max_tokens` -> 16, unset `seed` -> None); anything the engine could not run raises a
ValueError whose message starts with the field's name. Engine records become messages; read
them on the engine thread (they are live objects).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable

from engine import ChatPrompt, CompletionOutput, EngineStats, LLMEngine, SamplingParams
from engine.logprobs import TokenLogprob
from engine.structured.spec import StructuredOutput
from server import agentix_pb2 as pb
from server.chat_output import ChatOutput
from server.tool_parsers.forced import forced_output
from server.wire import program_info

if TYPE_CHECKING:
    from scheduler.process_table import ProgramRecord

DEFAULT_TOP_P = 1.0
DEFAULT_MAX_TOKENS = 16


def call_params(request: pb.GenerateRequest, forced: bool,
                function: str | None) -> SamplingParams:
    """The call's sampling parameters, with the output grammar of a forced tool call
    (`forced_tool(request)`'s (forced, function); it wins over `sampling.json_schema`);
    ValueError naming a bad field."""
    params = sampling_params(request.sampling)
    if not forced:
        return params
    tools = [_tool(tool, i) for i, tool in enumerate(request.messages.tools)]
    try:
        return replace(params, structured=forced_output(tools, function, parallel=True))
    except ValueError as exc:  # it names tool_choice, which is messages.tool_choice here
        raise ValueError(f"messages.{exc}") from None


def sampling_params(msg: pb.SamplingParams) -> SamplingParams:
    """Engine sampling parameters from the wire message (ValueError naming a bad field)."""
    return SamplingParams(
        structured=StructuredOutput(msg.json_schema) if msg.json_schema else None,
        temperature=float(msg.temperature),
        top_k=msg.top_k,
        top_p=float(msg.top_p) if msg.HasField("top_p") else DEFAULT_TOP_P,
        seed=msg.seed if msg.HasField("seed") else None,
        max_tokens=msg.max_tokens if msg.HasField("max_tokens") else DEFAULT_MAX_TOKENS,
        stop=tuple(msg.stop),
        stop_token_ids=tuple(msg.stop_token_ids),
        ignore_eos=msg.ignore_eos,
        logprobs=msg.logprobs if msg.HasField("logprobs") else None,
        prompt_logprobs=msg.prompt_logprobs if msg.HasField("prompt_logprobs") else None,
    )


def sampling_message(params: SamplingParams) -> pb.SamplingParams:
    """The wire form of engine sampling parameters (`sampling_params` reads it back; the
    wire's floats are 32-bit)."""
    message = pb.SamplingParams(
        temperature=params.temperature, top_k=params.top_k, top_p=params.top_p,
        max_tokens=params.max_tokens, stop=params.stop, stop_token_ids=params.stop_token_ids,
        ignore_eos=params.ignore_eos,
        json_schema=params.structured.json_schema if params.structured is not None else "")
    if params.seed is not None:
        message.seed = params.seed
    if params.logprobs is not None:
        message.logprobs = params.logprobs
    if params.prompt_logprobs is not None:
        message.prompt_logprobs = params.prompt_logprobs
    return message


def prompt(request: pb.GenerateRequest) -> str | list[int] | ChatPrompt:
    """The request's prompt: its text, its token ids (the engine checks the ids) or its
    chat messages (rendered by the engine with the model's chat template, with the tools
    unless `tool_choice` is "none"); ValueError naming a bad field."""
    kind = request.WhichOneof("prompt")
    if kind is None:
        raise ValueError("prompt: missing; set text, token_ids or messages")
    if kind == "text":
        if not request.text:
            raise ValueError("prompt: text must not be empty")
        return request.text
    if kind == "messages":
        chat = request.messages
        tools = None if chat.tool_choice == "none" else [
            _tool(tool, i) for i, tool in enumerate(chat.tools)]
        return ChatPrompt.of([_message(m) for m in chat.messages], tools)
    return list(request.token_ids.ids)


def forced_tool(request: pb.GenerateRequest) -> tuple[bool, str | None]:
    """(forced, function) of a chat's `tool_choice`: "", "auto" and "none" force nothing,
    "required" forces a call of any tool, any other value names the function to call.
    ValueError naming `messages.tool_choice` for a forced choice without tools."""
    choice = request.messages.tool_choice if request.WhichOneof("prompt") == "messages" else ""
    if choice in ("", "auto", "none"):
        return False, None
    if not request.messages.tools:
        raise ValueError("messages.tool_choice: a forced call needs tools")
    return True, None if choice == "required" else choice


def parses_tool_calls(request: pb.GenerateRequest) -> bool:
    """Whether the output is parsed into tool calls: chat with tools, tool choice auto."""
    return request.WhichOneof("prompt") == "messages" and bool(request.messages.tools) \
        and request.messages.tool_choice in ("", "auto")


def _message(message: pb.ChatMessage) -> dict[str, Any]:
    """A ChatMessage as an OpenAI-style message dict (`ChatPrompt.of` checks it)."""
    out: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.tool_calls:
        out["tool_calls"] = [{"id": call.id, "type": "function", "function": {
            "name": call.name, "arguments": call.arguments}} for call in message.tool_calls]
    if message.tool_call_id:
        out["tool_call_id"] = message.tool_call_id
    if message.name:
        out["name"] = message.name
    return out


def _tool(tool: pb.Tool, i: int) -> dict[str, Any]:
    function: dict[str, Any] = {"name": tool.name, "description": tool.description}
    if tool.parameters_json:
        try:
            function["parameters"] = json.loads(tool.parameters_json)
        except ValueError:
            raise ValueError(f"messages.tools[{i}].parameters_json: not valid JSON") from None
    return {"type": "function", "function": function}


def delta(call_id: str, token_ids: list[int], text: str,
          logprobs: list[TokenLogprob] | None = None,
          prompt_logprobs: list[TokenLogprob | None] | None = None) -> pb.GenerateResponse:
    """A Delta message; `prompt_logprobs` (the engine's: None first) without their None."""
    return pb.GenerateResponse(call_id=call_id, delta=pb.Delta(
        token_ids=token_ids, text=text, logprobs=_logprob_messages(logprobs or ()),
        prompt_logprobs=_logprob_messages(lp for lp in prompt_logprobs or () if lp)))


def _logprob_messages(entries: Iterable[TokenLogprob]) -> list[pb.TokenLogprob]:
    return [pb.TokenLogprob(token_id=lp.token_id, logprob=lp.logprob,
                            top=[pb.TopLogprob(token_id=t, logprob=v) for t, v in lp.top])
            for lp in entries]


def logprobs_of(messages: Iterable[pb.TokenLogprob]) -> list[TokenLogprob]:
    """A Delta's `logprobs` or `prompt_logprobs` as the engine's."""
    return [TokenLogprob(lp.token_id, lp.logprob, tuple((t.token_id, t.logprob) for t in lp.top))
            for lp in messages]


def final(completion: CompletionOutput, call_id: str,
          parsed: ChatOutput | None = None) -> pb.GenerateResponse:
    """The final message of a call (`call_id` as the client knows it); with `parsed` (its
    text through the request's parsers), the reasoning, the content part outside the calls
    and the calls, finishing with "tool_calls" when it made any and stopped by itself."""
    usage = pb.Usage(prompt_tokens=len(completion.prompt_token_ids),
                     cached_tokens=completion.num_cached_tokens,
                     completion_tokens=len(completion.token_ids),
                     queue_seconds=completion.queue_seconds,
                     service_seconds=completion.service_seconds)
    message = pb.Final(finish_reason=completion.finish_reason, usage=usage,
                       text=completion.text)
    if parsed is not None:
        message.text = parsed.content or ""
        message.reasoning = parsed.reasoning or ""
        message.tool_calls.extend(pb.ToolCall(id=c.id, name=c.name, arguments=c.arguments)
                                  for c in parsed.tool_calls)
        if parsed.tool_calls and completion.finish_reason == "stop":
            message.finish_reason = "tool_calls"
    return pb.GenerateResponse(call_id=call_id, final=message)


def model_info(engine: LLMEngine) -> pb.ModelInfoResponse:
    """`model` is the model directory's name (never the server's path); `num_kv_blocks`
    counts device blocks as EngineConfig does (the null block included)."""
    config = engine.config
    return pb.ModelInfoResponse(model=Path(config.model).name, vocab_size=engine.vocab_size,
                                max_model_len=engine.max_model_len, policy=config.policy,
                                block_size=config.block_size,
                                num_kv_blocks=engine.kv.pool.num_blocks)


def engine_stats(stats: EngineStats, top: list[ProgramRecord], outer: Callable[[str], str]
                 ) -> pb.EngineStatsResponse:
    """The EngineStats message of a snapshot and the records of its top programs (read the
    records on the engine thread; ids through `outer`, the caller's namespace)."""
    load, counters = stats.load, stats.counters
    return pb.EngineStatsResponse(
        calls_running=load.calls_running, calls_waiting=load.calls_waiting,
        calls_swapped=load.calls_swapped, programs_active=load.programs_active,
        kv_blocks_total=stats.kv_blocks_total, kv_blocks_free=stats.kv_blocks_free,
        kv_blocks_cached=stats.kv_blocks_cached, kv_blocks_used=stats.kv_blocks_used,
        host_blocks_total=stats.host_blocks_total, host_blocks_used=stats.host_blocks_used,
        queue_depths=list(load.queue_depths), running_tokens=load.running_tokens,
        waiting_tokens=load.waiting_tokens,
        preemptions_recompute=stats.preemptions["recompute"],
        preemptions_swap=stats.preemptions["swap"], preemptions_keep=stats.preemptions["keep"],
        swap_out_bytes=counters.swap_out_bytes, swap_in_bytes=counters.swap_in_bytes,
        prompt_tokens_computed=counters.prompt_tokens_computed,
        prompt_tokens_cached=counters.prompt_tokens_cached,
        generation_tokens=counters.generation_tokens, promotions=stats.promotions,
        steps=stats.steps, top_programs=[program_info(r, outer) for r in top])
