"""Tools over gRPC, on the model that answers every chat with one hermes-style tool call
(tests/tool_call_model.py): `ChatMessages.tools` reach the chat template, an assistant's
`tool_calls` and a tool's `tool_call_id` round-trip through it, and with a tool parser on
the server the final message carries the parsed call (finish_reason "tool_calls"; cut by
max_tokens: the arguments so far and "length"); with a reasoning parser too, on the model
that thinks first (tests/reasoning_model.py), the final message's `reasoning` is split off
and the call read from the rest; a malformed forced `tool_choice` is refused naming it
(forced calls themselves: tests/server/test_grpc_structured.py)."""

from __future__ import annotations

import json

import grpc
import pytest
from grpc_helpers import collect, server_config, wait_idle
from reasoning_model import REASONING
from tool_call_model import CALL_ARGUMENTS as ARGUMENTS, CALL_TEXT

from server import agentix_pb2 as pb
from server import agentix_pb2_grpc
from server.app import start_server

TOOL = pb.Tool(name="get_weather", description="the weather",
               parameters_json=json.dumps({"type": "object",
                                           "properties": {"city": {"type": "string"}}}))


@pytest.fixture(scope="module")
def model_dir(tool_call_model_dir):
    return tool_call_model_dir


def stub_of(model_dir: str, **options):
    server = start_server(server_config(model_dir), port=0, **options)
    channel = grpc.insecure_channel(server.address)
    return server, channel, agentix_pb2_grpc.AgentixStub(channel)


def chat(*messages: pb.ChatMessage, tools=(TOOL,), tool_choice: str = "") -> pb.GenerateRequest:
    return pb.GenerateRequest(
        messages=pb.ChatMessages(messages=messages, tools=tools, tool_choice=tool_choice),
        sampling=pb.SamplingParams(max_tokens=32))


HELLO = pb.ChatMessage(role="user", content="hello")


@pytest.fixture(scope="module")
def parsing_server(model_dir):
    """(server, stub) with the hermes tool parser on."""
    server, channel, stub = stub_of(model_dir, tool_call_parser="hermes")
    yield server, stub
    channel.close()
    server.stop(grace=0)


@pytest.fixture(scope="module")
def parsing(parsing_server):
    return parsing_server[1]


def test_the_final_message_carries_the_parsed_call(parsing):
    _, text, final = collect(parsing.Generate(chat(HELLO)))
    assert text == CALL_TEXT  # the deltas stream the raw text
    (call,) = final.tool_calls
    assert (call.name, call.arguments, final.finish_reason, final.text, final.reasoning) == (
        "get_weather", ARGUMENTS, "tool_calls", "", "")
    assert call.id.startswith("call_")
    assert final.usage.prompt_tokens == 3  # "tools hello go": the tools reached the template


def test_with_a_reasoning_parser_the_final_message_splits_the_reasoning_off(
        reasoning_model_dir):
    server, channel, stub = stub_of(reasoning_model_dir, tool_call_parser="hermes",
                                    reasoning_parser="qwen3")
    try:
        _, text, final = collect(stub.Generate(chat(HELLO)))
        assert text == f"<think>{REASONING}</think> {CALL_TEXT}"  # the deltas: raw text
        assert [(c.name, c.arguments) for c in final.tool_calls] == [("get_weather", ARGUMENTS)]
        assert (final.reasoning, final.text, final.finish_reason) == (REASONING, "",
                                                                      "tool_calls")
        _, _, plain = collect(stub.Generate(chat(HELLO, tool_choice="none")))
        assert (plain.reasoning, plain.text) == (REASONING, f" {CALL_TEXT}")
        text_prompt = pb.GenerateRequest(text="hello go", sampling=pb.SamplingParams(
            max_tokens=32))
        _, _, raw = collect(stub.Generate(text_prompt))  # not a chat: nothing split
        assert (raw.reasoning, raw.text) == ("", text)
    finally:
        channel.close()
        server.stop(grace=0)


def test_a_call_cut_by_max_tokens_is_in_the_final_message_with_its_arguments_so_far(parsing):
    request = chat(HELLO)
    request.sampling.max_tokens = 5  # the output ends at ' {"city":'
    _, text, final = collect(parsing.Generate(request))
    assert text == " ".join(CALL_TEXT.split()[:5])
    assert [(c.name, c.arguments) for c in final.tool_calls] == [("get_weather", '{"city": ')]
    assert (final.finish_reason, final.text) == ("length", "")


def test_a_conversation_with_calls_and_results_reaches_the_template(parsing):
    answer = pb.ChatMessage(role="assistant", tool_calls=[
        pb.ToolCall(id="call_1", name="get_weather", arguments=ARGUMENTS)])
    result = pb.ChatMessage(role="tool", tool_call_id="call_1", name="get_weather",
                            content="sunny")
    _, _, final = collect(parsing.Generate(chat(HELLO, answer, result)))
    assert final.usage.prompt_tokens == 4  # tools hello (empty) sunny go


def test_tool_choice_none_hides_the_tools_and_parses_nothing(parsing):
    _, text, final = collect(parsing.Generate(chat(HELLO, tool_choice="none")))
    assert (final.text, list(final.tool_calls), final.finish_reason) == (CALL_TEXT, [], "stop")
    assert final.usage.prompt_tokens == 2


@pytest.mark.parametrize("request_, words", [
    (chat(HELLO, tools=(), tool_choice="required"),
     "messages.tool_choice: a forced call needs tools"),
    (chat(HELLO, tools=(), tool_choice="get_weather"),
     "messages.tool_choice: a forced call needs tools"),
    (chat(HELLO, tool_choice="nope"),
     "messages.tool_choice: function 'nope' is not among the tools"),
    (chat(HELLO, tools=(pb.Tool(name="f", parameters_json="{"),)),
     "messages.tools[0].parameters_json: not valid JSON"),
    (chat(HELLO, tools=(pb.Tool(name="f", parameters_json="{"),), tool_choice="f"),
     "messages.tools[0].parameters_json: not valid JSON"),
])
def test_bad_tool_fields_are_invalid_argument_naming_them(parsing_server, request_, words):
    """Refused before a call is made: nothing is left on the server."""
    server, stub = parsing_server
    with pytest.raises(grpc.RpcError) as info:
        collect(stub.Generate(request_))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert words in info.value.details()
    wait_idle(server)


def test_tools_without_a_parser_on_the_server_are_refused(model_dir):
    server, channel, stub = stub_of(model_dir)
    try:
        with pytest.raises(grpc.RpcError) as info:
            collect(stub.Generate(chat(HELLO)))
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "--tool-call-parser" in info.value.details()
        _, text, final = collect(stub.Generate(chat(HELLO, tool_choice="none")))
        assert final.text == CALL_TEXT
    finally:
        channel.close()
        server.stop(grace=0)
