"""Tool calling through the HTTP door with the official `openai` SDK, on a model that always
answers with one hermes-style call (tests/tool_call_model.py): the call comes back as
`message.tool_calls` with finish_reason "tool_calls", streamed as OpenAI's tool-call deltas
(its arguments as the model writes them), and cut by max_tokens as a call with the
arguments so far and finish_reason "length";
the offered tools reach the chat template; tool_choice "none" and a server without a parser
behave as vLLM's do."""

from __future__ import annotations

import json

import openai
import pytest
from grpc_helpers import server_config
from tool_call_model import CALL_ARGUMENTS as ARGUMENTS, CALL_TEXT
from tool_parser_helpers import joined_calls

from server.app import start_server

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "parameters": {"type": "object",
                                          "properties": {"city": {"type": "string"}}}}}]
MESSAGES = [{"role": "user", "content": "hello"}]


@pytest.fixture(scope="module")
def model_dir(tool_call_model_dir):
    return tool_call_model_dir


def serve(model_dir: str, **options):
    return start_server(server_config(model_dir), port=None, http_port=0,
                        served_model_name="tiny", **options)


@pytest.fixture(scope="module")
def client(model_dir):
    server = serve(model_dir, tool_call_parser="hermes")
    with openai.OpenAI(base_url=f"http://{server.http_address}/v1", api_key="unused",
                       max_retries=0) as client:
        yield client
    server.stop(grace=0)


def create(client, stream: bool = False, **body):
    body = {"max_tokens": 32, **body}
    return client.chat.completions.create(model="tiny", messages=MESSAGES, temperature=0,
                                          stream=stream, extra_body={"return_token_ids": True},
                                          **body)


def test_a_tool_call_comes_back_as_tool_calls(client):
    answer = create(client, tools=TOOLS)
    choice = answer.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    (call,) = choice.message.tool_calls
    assert (call.type, call.function.name, call.function.arguments) == \
        ("function", "get_weather", ARGUMENTS)
    assert call.id.startswith("call_") and len(call.id) == 29
    assert answer.usage.prompt_tokens == 3  # "tools hello go": the tools reached the template


def test_a_streamed_tool_call_arrives_as_openai_deltas(client):
    chunks = list(create(client, stream=True, tools=TOOLS))
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    assert deltas[0].role == "assistant"
    opening, *arguments = [d.tool_calls[0] for d in deltas if d.tool_calls]
    assert (opening.index, opening.function.name, opening.function.arguments) == \
        (0, "get_weather", "")
    assert opening.id.startswith("call_") and opening.type == "function"
    # the arguments as the model writes them: its tokens ' {"city":' and ' "Paris"}}'
    assert [(a.index, a.function.arguments) for a in arguments] == \
        [(0, '{"city": '), (0, '"Paris"}')]
    assert not "".join(d.content or "" for d in deltas)  # no marker leaked as content
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"


@pytest.mark.parametrize("stream", [False, True])
def test_a_call_cut_by_max_tokens_is_a_call_with_the_arguments_so_far(client, stream):
    """Five tokens end at ' {"city":': the call, its arguments so far, finish_reason
    "length"; two end before the name is known: content."""
    cut, early = (create(client, stream, tools=TOOLS, max_tokens=n) for n in (5, 2))
    if stream:
        cut, early = (assembled(list(chunks)) for chunks in (cut, early))
    else:
        cut, early = ((c.choices[0].message.content,
                       [(t.function.name, t.function.arguments)
                        for t in c.choices[0].message.tool_calls or ()],
                       c.choices[0].finish_reason) for c in (cut, early))
    assert cut == ("" if stream else None, [("get_weather", '{"city": ')], "length")
    assert early == ('<tool_call> {"name":', [], "length")


def assembled(chunks) -> tuple[str, list[tuple[str, str]], str]:
    """(content, [(name, arguments)], finish_reason) of a streamed choice."""
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    return ("".join(d.content or "" for d in deltas),
            joined_calls(t for d in deltas for t in d.tool_calls or ()),
            [c.choices[0].finish_reason for c in chunks if c.choices][-1])


def test_tool_choice_none_shows_no_tools_and_parses_nothing(client):
    answer = create(client, tools=TOOLS, tool_choice="none")
    choice = answer.choices[0]
    assert (choice.message.content, choice.message.tool_calls) == (CALL_TEXT, None)
    assert choice.finish_reason == "stop" and answer.usage.prompt_tokens == 2


def test_without_tools_the_output_is_plain_text(client):
    choice = create(client).choices[0]
    assert (choice.message.content, choice.finish_reason) == (CALL_TEXT, "stop")


def test_a_tool_result_turn_is_accepted(client):
    messages = MESSAGES + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": ARGUMENTS}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]
    answer = client.chat.completions.create(model="tiny", messages=messages, tools=TOOLS,
                                            temperature=0, max_tokens=32)
    assert answer.usage.prompt_tokens == 4  # tools hello sunny go (the call turn has no words)
    assert json.loads(answer.choices[0].message.tool_calls[0].function.arguments) == \
        {"city": "Paris"}


def test_auto_tool_choice_without_a_parser_is_a_400_naming_tool_choice(model_dir):
    server = serve(model_dir)
    try:
        with openai.OpenAI(base_url=f"http://{server.http_address}/v1", api_key="unused",
                           max_retries=0) as plain:
            with pytest.raises(openai.BadRequestError) as info:
                create(plain, tools=TOOLS)
            assert info.value.body["param"] == "tool_choice"
            assert "--enable-auto-tool-choice" in info.value.body["message"]
            assert create(plain, tools=TOOLS, tool_choice="none").choices[0].message.content \
                == CALL_TEXT
    finally:
        server.stop(grace=0)
