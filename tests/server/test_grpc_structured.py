"""Structured output over gRPC, on the tiny random Llama with a byte-level tokenizer (any
JSON can be spelled): `SamplingParams.json_schema` constrains the output to one JSON value of
the schema, and `ChatMessages.tool_choice` "required" or a function's name forces a call
whose arguments match that function's parameters (no tool parser needed on the server).
Random weights: the schemas force a short output, so each call ends with "stop" by itself.
Malformed schemas and choices are INVALID_ARGUMENT naming the field, and after every test
nothing is left on the server."""

from __future__ import annotations

import json

import grpc
import jsonschema
import pytest
from grpc_helpers import assert_clean, collect, free_blocks, gen_request, server_config
from structured_schemas import FLAG, PICK, SCHEMAS

from server import agentix_pb2 as pb
from server import agentix_pb2_grpc
from server.app import start_server

TOOLS = [pb.Tool(name=name, parameters_json=json.dumps(schema))
         for name, schema in SCHEMAS.items()]
MAX_TOKENS = 60


@pytest.fixture(scope="module")
def server(byte_llama):
    server = start_server(server_config(byte_llama[0]), port=0)  # no tool parser
    yield server
    server.stop(grace=0)


@pytest.fixture(scope="module")
def stub(server):
    with grpc.insecure_channel(server.address) as channel:
        yield agentix_pb2_grpc.AgentixStub(channel)


@pytest.fixture(autouse=True)
def clean(server):
    free = free_blocks(server)
    yield
    assert_clean(server, free)


def chat(tool_choice: str, tools=TOOLS, **sampling) -> pb.GenerateRequest:
    return pb.GenerateRequest(
        messages=pb.ChatMessages(messages=[pb.ChatMessage(role="user", content="hi")],
                                 tools=tools, tool_choice=tool_choice),
        sampling=pb.SamplingParams(**{"max_tokens": MAX_TOKENS, **sampling}))


def test_json_schema_makes_the_text_json_of_the_schema(stub):
    ids, text, final = collect(stub.Generate(gen_request("hi", max_tokens=MAX_TOKENS,
                                                         json_schema=json.dumps(PICK))))
    assert (final.finish_reason, final.text, list(final.tool_calls)) == ("stop", text, [])
    value = json.loads(text)
    jsonschema.validate(value, PICK)
    assert text == json.dumps(value, separators=(",", ":"))  # compact
    # one token per byte, no EOS after the grammar's end
    assert len(ids) == final.usage.completion_tokens == len(text.encode())


def test_json_schema_on_a_chat_without_tools(stub):
    request = chat("", tools=(), json_schema=json.dumps(FLAG))
    _, text, final = collect(stub.Generate(request))
    assert final.finish_reason == "stop" and final.text == text
    jsonschema.validate(json.loads(text), FLAG)


def test_a_named_function_comes_back_as_its_call(stub):
    """The deltas stream the arguments JSON as the grammar spells it; the final message
    carries it as the call, and no text."""
    _, text, final = collect(stub.Generate(chat("pick")))
    (call,) = final.tool_calls
    assert (call.name, final.text, final.finish_reason) == ("pick", "", "tool_calls")
    assert call.id.startswith("call_") and len(call.id) == 29
    arguments = json.loads(call.arguments)
    jsonschema.validate(arguments, PICK)
    assert json.loads(text) == arguments


def test_a_forced_call_wins_over_json_schema(stub):
    _, _, final = collect(stub.Generate(chat("flag", json_schema=json.dumps(PICK))))
    (call,) = final.tool_calls
    assert call.name == "flag" and final.finish_reason == "tool_calls"
    jsonschema.validate(json.loads(call.arguments), FLAG)


def test_required_calls_offered_functions(stub):
    _, text, final = collect(stub.Generate(chat("required")))
    assert (final.text, final.finish_reason) == ("", "tool_calls")
    assert len(final.tool_calls) >= 1
    spelled = json.loads(text)  # [{"name": ..., "parameters": {...}}, ...]
    assert [(c.name, json.loads(c.arguments)) for c in final.tool_calls] == \
        [(item["name"], item["parameters"]) for item in spelled]
    for call in final.tool_calls:
        jsonschema.validate(json.loads(call.arguments), SCHEMAS[call.name])


def test_tool_choice_none_leaves_free_text(stub):
    _, text, final = collect(stub.Generate(chat("none", max_tokens=4)))
    assert (final.text, list(final.tool_calls), final.finish_reason) == (text, [], "length")


@pytest.mark.parametrize("request_, words", [
    (gen_request("hi", json_schema="{"), "json_schema: not valid JSON"),
    (gen_request("hi", json_schema="[]"), "json_schema: must be a JSON object"),
    (gen_request("hi", json_schema='{"type": "wat"}'),
     "json_schema: cannot be compiled: Invalid type: wat"),
    (chat("nope"), "messages.tool_choice: function 'nope' is not among the tools"),
    (chat("required", tools=()), "messages.tool_choice: a forced call needs tools"),
    (chat("pick", tools=()), "messages.tool_choice: a forced call needs tools"),
], ids=["not-json", "not-an-object", "uncompilable", "unknown-function",
        "required-without-tools", "named-without-tools"])
def test_malformed_requests_are_invalid_argument_naming_the_field(stub, request_, words):
    with pytest.raises(grpc.RpcError) as info:
        collect(stub.Generate(request_))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert info.value.details().startswith(words), info.value.details()
