"""Structured output through the HTTP door with the official `openai` SDK, on the tiny random
Llama with a byte-level tokenizer (any JSON can be spelled): chat `response_format`
(json_schema, json_object), forced `tool_choice` (a named function, "required"), the
Responses API's `text.format` and forced calls, and a 400 naming the field for each
malformed request; a panic in one call's grammar is that call's 500. Random weights: the
outputs are arbitrary but must match their grammar, so the schemas force a short output
(enums, bounded integers) and each call ends with "stop" well before `max_tokens`. After
every test nothing is left on the server: no call, no block, no program."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import jsonschema
import openai
import pytest
from grammar_faults import panic_in_grammars
from grpc_helpers import server_config, wait_idle
from structured_schemas import FLAG, PICK, SCHEMAS
from tool_parser_helpers import joined_calls

from server.app import start_server

TOOLS = [{"type": "function", "function": {"name": name, "parameters": schema}}
         for name, schema in SCHEMAS.items()]
FLAT_TOOLS = [{"type": "function", "name": name, "parameters": schema}
              for name, schema in SCHEMAS.items()]
JSON_SCHEMA = {"type": "json_schema", "json_schema": {"name": "pick", "schema": PICK,
                                                      "strict": True}}
JSON_OBJECT = {"type": "json_object"}
# Greedy on this model, "yes" leads json_object to a one-key object that closes within
# 24 tokens (most prompts wander in an endless key string: nothing bounds json_object).
OBJECT_PROMPT = "yes"
MAX_TOKENS = 48


@pytest.fixture(scope="module")
def server(byte_llama):
    server = start_server(server_config(byte_llama[0]), port=None, http_port=0,
                          served_model_name="tiny")
    yield server
    server.stop(grace=0)


@pytest.fixture(scope="module")
def client(server):
    with openai.OpenAI(base_url=f"http://{server.http_address}/v1", api_key="unused",
                       max_retries=0) as client:
        yield client


def programs(server) -> int:
    return server.engine_loop.call(lambda engine: engine.stats().load.programs_active)


@pytest.fixture(autouse=True)
def nothing_left(server):
    """After each test: no call, no block and no more programs than before it."""
    before = programs(server)
    yield
    wait_idle(server)
    assert programs(server) == before


def messages(prompt: str = "hi") -> list[dict[str, Any]]:
    return [{"role": "user", "content": prompt}]


def create(client, prompt: str = "hi", stream: bool = False, **body):
    body = {"temperature": 0, "max_tokens": MAX_TOKENS, **body}
    return client.chat.completions.create(model="tiny", messages=messages(prompt),
                                          stream=stream, **body)


def compact(value: Any) -> str:
    """JSON as the grammar spells it: no whitespace between tokens."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def streamed_chat(client, prompt: str = "hi", **body) -> tuple[str, list, list[str | None]]:
    """(the content deltas joined, the tool-call deltas in order, the finish reasons) of
    a streamed chat."""
    chunks = list(create(client, prompt, stream=True, **body))
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    assert deltas[0].role == "assistant"
    content = "".join(d.content or "" for d in deltas)
    calls = [call for d in deltas for call in d.tool_calls or ()]
    return content, calls, [c.choices[0].finish_reason for c in chunks if c.choices]


def assert_valid_calls(calls, names: tuple[str, ...]) -> None:
    """Each call is a function call of one of `names` (ids `call_` + 24 hex digits) whose
    arguments are a JSON object of that function's schema."""
    for call in calls:
        assert call.type == "function" and call.function.name in names, call
        assert call.id.startswith("call_") and len(call.id) == 29, call.id
        jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])


# ----- response_format ----------------------------------------------------------------

@pytest.mark.parametrize("response_format, prompt, schema", [
    (JSON_SCHEMA, "hi", PICK),
    (JSON_OBJECT, OBJECT_PROMPT, {"type": "object"}),
], ids=["json_schema-strict", "json_object"])
def test_response_format_content_is_json_of_the_schema(client, response_format, prompt,
                                                       schema):
    answer = create(client, prompt, response_format=response_format)
    choice = answer.choices[0]
    assert choice.finish_reason == "stop", choice  # the grammar ended the call
    assert choice.message.tool_calls is None
    value = json.loads(choice.message.content)
    jsonschema.validate(value, schema)
    assert choice.message.content == compact(value)
    # one token per byte, and the call ends with the grammar: no EOS, nothing after it
    assert answer.usage.completion_tokens == len(choice.message.content.encode())
    content, calls, finishes = streamed_chat(client, prompt, response_format=response_format)
    assert (content, calls, finishes[-1]) == (choice.message.content, [], "stop")
    assert finishes[:-1] == [None] * (len(finishes) - 1)


def test_response_format_text_is_free_text(client):
    choice = create(client, response_format={"type": "text"}, max_tokens=6).choices[0]
    free = create(client, max_tokens=6).choices[0]
    assert (choice.message.content, choice.finish_reason) == (free.message.content, "length")


def test_each_choice_and_each_concurrent_call_keeps_its_own_grammar(client):
    """n=2 sampled choices of one schema, and calls of two schemas decoding side by side:
    each output matches its own schema."""
    answer = create(client, response_format=JSON_SCHEMA, n=2, temperature=1.0, seed=7)
    assert [c.finish_reason for c in answer.choices] == ["stop", "stop"]
    for choice in answer.choices:
        jsonschema.validate(json.loads(choice.message.content), PICK)
    formats = [JSON_SCHEMA, {"type": "json_schema", "json_schema": {"name": "flag",
                                                                     "schema": FLAG}}]
    with ThreadPoolExecutor(len(formats)) as pool:
        answers = list(pool.map(lambda f: create(client, response_format=f), formats))
    for answer, schema in zip(answers, [PICK, FLAG]):
        assert answer.choices[0].finish_reason == "stop"
        jsonschema.validate(json.loads(answer.choices[0].message.content), schema)


def test_a_panic_in_one_calls_grammar_is_its_500_and_the_engine_goes_on(client, monkeypatch):
    """llguidance panicking (a BaseException) as the engine thread hands a call its 2nd
    token: that call is a 500; the engine thread lives on, and the same request as before
    the panic gets the same answer."""
    before = create(client, response_format=JSON_SCHEMA).choices[0]
    panic_in_grammars(monkeypatch, lambda spec: json.loads(spec.json_schema).get("title")
                      == "panics", "consume_token", 2)
    panics = {"type": "json_schema", "json_schema": {"name": "pick",
                                                     "schema": {**PICK, "title": "panics"}}}
    with pytest.raises(openai.InternalServerError,
                       match="the engine failed while running this call"):
        create(client.with_options(timeout=10), response_format=panics)
    after = create(client.with_options(timeout=10), response_format=JSON_SCHEMA).choices[0]
    assert (after.message.content, after.finish_reason) == (before.message.content, "stop")


def generated(server) -> int:
    return server.engine_loop.call(lambda engine: engine.stats().counters.generation_tokens)


def test_a_stream_closed_early_leaves_nothing(client, server):
    """json_object on a prompt whose object never closes: the client reads two chunks and
    goes away; the constrained call is aborted before its 200 tokens, and freed (no call,
    block or program left: `nothing_left`)."""
    before = generated(server)
    stream = create(client, stream=True, response_format=JSON_OBJECT, max_tokens=200)
    chunks = iter(stream)
    assert next(chunks).choices[0].delta.role == "assistant"
    assert next(chunks).choices[0].delta.content.startswith("{")
    stream.close()
    wait_idle(server)
    assert generated(server) - before < 200


# ----- tool_choice --------------------------------------------------------------------

NAMED = {"type": "function", "function": {"name": "pick"}}


def test_a_named_function_is_called_with_arguments_of_its_schema(client):
    choice = create(client, tools=TOOLS, tool_choice=NAMED).choices[0]
    # a stop after calls is "tool_calls" (openai_protocol.tool_calls_finish), forced or not
    assert (choice.finish_reason, choice.message.content) == ("tool_calls", None)
    (call,) = choice.message.tool_calls
    assert_valid_calls([call], ("pick",))
    content, calls, finishes = streamed_chat(client, tools=TOOLS, tool_choice=NAMED)
    assert (content, finishes[-1]) == ("", "tool_calls")
    # the call opens at once, then its arguments stream as the model writes them
    opening, *arguments = calls
    assert (opening.index, opening.type, opening.function.name, opening.function.arguments) \
        == (0, "function", "pick", "")
    assert opening.id.startswith("call_")
    assert len(arguments) > 1 and all(a.function.arguments for a in arguments)
    assert {(a.index, a.id, a.type, a.function.name) for a in arguments} == \
        {(0, None, None, None)}
    assert "".join(a.function.arguments for a in arguments) == call.function.arguments


def test_a_forced_call_wins_over_response_format(client):
    """With both, the output is the call (vLLM's order): response_format asked for a flag,
    tool_choice for pick."""
    flag_format = {"type": "json_schema", "json_schema": {"name": "flag", "schema": FLAG}}
    choice = create(client, tools=TOOLS, tool_choice=NAMED,
                    response_format=flag_format).choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    (call,) = choice.message.tool_calls
    assert_valid_calls([call], ("pick",))


def test_tool_choice_none_with_response_format_is_json_content(client):
    choice = create(client, tools=TOOLS, tool_choice="none",
                    response_format=JSON_SCHEMA).choices[0]
    assert (choice.finish_reason, choice.message.tool_calls) == ("stop", None)
    jsonschema.validate(json.loads(choice.message.content), PICK)


@pytest.mark.parametrize("parallel", [True, False])
def test_required_calls_offered_functions_with_valid_arguments(client, parallel):
    choice = create(client, tools=TOOLS, tool_choice="required",
                    parallel_tool_calls=parallel).choices[0]
    assert (choice.finish_reason, choice.message.content) == ("tool_calls", None)
    assert len(choice.message.tool_calls) >= 1
    if not parallel:
        assert len(choice.message.tool_calls) == 1
    assert_valid_calls(choice.message.tool_calls, ("pick", "flag"))
    content, calls, finishes = streamed_chat(client, tools=TOOLS, tool_choice="required",
                                             parallel_tool_calls=parallel)
    assert (content, finishes[-1]) == ("", "tool_calls")
    assert joined_calls(calls) == [(c.function.name, c.function.arguments)
                        for c in choice.message.tool_calls]


def test_a_forced_call_cut_by_max_tokens_is_a_call_with_the_arguments_so_far(client):
    """The token limit one byte short of the whole call: a tool call (never content) whose
    arguments lack only the closing brace, finish_reason "length", streamed or not; on the
    Responses API an incomplete response whose function_call item is incomplete."""
    whole = create(client, tools=TOOLS, tool_choice=NAMED)
    (call,) = whole.choices[0].message.tool_calls
    raw = compact(json.loads(call.function.arguments))  # as the grammar spells it
    assert whole.usage.completion_tokens == len(raw)  # one token per byte
    cut = create(client, tools=TOOLS, tool_choice=NAMED, max_tokens=len(raw) - 1).choices[0]
    assert (cut.finish_reason, cut.message.content) == ("length", None)
    (partial,) = cut.message.tool_calls
    assert (partial.function.name, partial.function.arguments) == \
        ("pick", call.function.arguments[:-1])
    content, calls, finishes = streamed_chat(client, tools=TOOLS, tool_choice=NAMED,
                                             max_tokens=len(raw) - 1)
    assert (content, joined_calls(calls), finishes[-1]) == \
        ("", [("pick", call.function.arguments[:-1])], "length")
    response = respond(client, tools=FLAT_TOOLS, tool_choice={"type": "function",
                                                              "name": "pick"},
                       max_output_tokens=len(raw) - 1)
    (item,) = response.output
    assert (response.status, response.incomplete_details.reason) == \
        ("incomplete", "max_output_tokens")
    assert (item.type, item.status, item.arguments) == \
        ("function_call", "incomplete", call.function.arguments[:-1])


# ----- the Responses API --------------------------------------------------------------

TEXT_FORMAT = {"format": {"type": "json_schema", "name": "pick", "schema": PICK,
                          "strict": True}}


def respond(client, **body):
    body = {"temperature": 0, "max_output_tokens": MAX_TOKENS, **body}
    return client.responses.create(model="tiny", input="hi", **body)


def test_responses_text_format_json_schema(client):
    response = respond(client, text=TEXT_FORMAT)
    assert response.status == "completed"
    (item,) = response.output
    assert (item.type, item.status) == ("message", "completed")
    jsonschema.validate(json.loads(response.output_text), PICK)
    with client.responses.stream(model="tiny", input="hi", temperature=0,
                                 max_output_tokens=MAX_TOKENS, text=TEXT_FORMAT) as stream:
        events = list(stream)
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == \
        response.output_text
    assert events[-1].type == "response.completed"


@pytest.mark.parametrize("tool_choice, names", [
    ("required", ("pick", "flag")),
    ({"type": "function", "name": "flag"}, ("flag",)),
], ids=["required", "named"])
def test_responses_forced_tool_choice_gives_function_call_items(client, tool_choice, names):
    response = respond(client, tools=FLAT_TOOLS, tool_choice=tool_choice,
                       parallel_tool_calls=False)
    assert response.status == "completed"
    (item,) = response.output
    assert (item.type, item.status) == ("function_call", "completed")
    assert item.name in names and item.call_id.startswith("call_")
    jsonschema.validate(json.loads(item.arguments), SCHEMAS[item.name])


# ----- what is refused ----------------------------------------------------------------

BAD_CHATS = {
    # id: (body fields, param, words the message must contain)
    "response_format-xml": (dict(response_format={"type": "xml"}),
                            "response_format.type", ("json_schema", "'xml'")),
    "json_schema-without-schema": (dict(response_format={"type": "json_schema",
                                                         "json_schema": {"name": "x"}}),
                                   "response_format.json_schema.schema", ("JSON Schema",)),
    "json_schema-schema-not-an-object": (
        dict(response_format={"type": "json_schema",
                              "json_schema": {"name": "x", "schema": ["not", "a", "schema"]}}),
        "response_format.json_schema.schema", ("JSON Schema",)),
    # the schema is a JSON object the grammar library cannot compile: the param names the
    # request's field, as for a missing schema (not the engine's "json_schema")
    "json_schema-uncompilable": (dict(response_format={"type": "json_schema", "json_schema": {
                                     "name": "x", "schema": {"type": "wat"}}}),
                                 "response_format.json_schema.schema",
                                 ("cannot be compiled", "wat")),
    "tool_choice-not-among-the-tools": (dict(tools=TOOLS, tool_choice={
                                            "type": "function", "function": {"name": "nope"}}),
                                        "tool_choice", ("'nope'", "not among the tools")),
    "tool_choice-required-without-tools": (dict(tool_choice="required"), "tool_choice",
                                           ("needs tools",)),
    "tool_choice-named-without-tools": (dict(tool_choice=NAMED), "tool_choice",
                                        ("needs tools",)),
    "tool_choice-malformed": (dict(tools=TOOLS, tool_choice="always"), "tool_choice",
                              ('"required"',)),
    "tool_choice-function-without-name": (dict(tools=TOOLS, tool_choice={"type": "function"}),
                                          "tool_choice", ("name",)),
    "tools-function-without-name": (dict(tools=[{"type": "function", "function": {}}],
                                         tool_choice="required"),
                                    "tools[0].function.name", ("non-empty string",)),
}


STREAMED_BAD_CHATS = ("json_schema-uncompilable", "tool_choice-not-among-the-tools")


@pytest.mark.parametrize("case, stream", [(case, False) for case in BAD_CHATS]
                         + [(case, True) for case in STREAMED_BAD_CHATS],
                         ids=list(BAD_CHATS) + [f"{c}-streamed" for c in STREAMED_BAD_CHATS])
def test_a_malformed_request_is_a_400_naming_the_field(client, case, stream):
    """Refused before any call is made (streamed too: the JSON error, no event stream),
    so nothing is left on the server (`nothing_left`)."""
    fields, param, words = BAD_CHATS[case]
    with pytest.raises(openai.BadRequestError) as info:
        create(client, stream=stream, **fields)
    error = info.value.body
    assert (error["type"], error["param"]) == ("invalid_request_error", param), error
    assert error["message"].startswith(f"{param}: "), error
    for word in words:
        assert word in error["message"], (word, error)


@pytest.mark.parametrize("text, param", [
    ({"format": {"type": "xml"}}, "text.format.type"),
    ({"format": {"type": "json_schema", "name": "x"}}, "text.format.schema"),
    ({"format": {"type": "json_schema", "name": "x", "schema": {"type": "wat"}}},
     "text.format.schema"),
], ids=["xml", "without-schema", "uncompilable"])
def test_a_malformed_text_format_is_a_400_naming_the_field(client, text, param):
    with pytest.raises(openai.BadRequestError) as info:
        respond(client, text=text)
    assert info.value.body["param"] == param, info.value.body
