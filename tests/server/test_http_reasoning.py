"""Reasoning through the HTTP door with the official `openai` SDK, on a server started with
`reasoning_parser="qwen3"` and the hermes tool parser over the model that says
`<think> weather? </think>` and then one tool call (tests/reasoning_model.py): chat's
`reasoning_content` (streamed as deltas) before the calls read from the content, Responses'
reasoning items (streamed with the API's events, accepted back as input),
`chat_template_kwargs` reaching the template (thinking off: all content), a 400 naming a bad
`chat_template_kwargs`, and a model without the markers refused at start."""

from __future__ import annotations

import openai
import pytest
from grpc_helpers import server_config
from reasoning_model import REASONING
from tool_call_model import CALL_ARGUMENTS, CALL_TEXT

from server.app import start_server

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "parameters": {"type": "object",
                                          "properties": {"city": {"type": "string"}}}}}]
RESPONSE_TOOLS = [{"type": "function", "name": "get_weather",
                   "parameters": TOOLS[0]["function"]["parameters"]}]
MESSAGES = [{"role": "user", "content": "hello"}]


@pytest.fixture(scope="module")
def client(reasoning_model_dir):
    server = start_server(server_config(reasoning_model_dir), port=None, http_port=0,
                          served_model_name="tiny", tool_call_parser="hermes",
                          reasoning_parser="qwen3")
    with openai.OpenAI(base_url=f"http://{server.http_address}/v1", api_key="unused",
                       max_retries=0) as client:
        yield client
    server.stop(grace=0)


def chat(client, stream: bool = False, **body) -> tuple[str | None, str | None, list, str]:
    """(reasoning, content, [(name, arguments)], finish_reason) of one chat answer; streamed,
    the deltas joined (None for no text)."""
    answer = client.chat.completions.create(
        model="tiny", messages=MESSAGES, temperature=0, stream=stream,
        **{"max_tokens": 32, **body})
    if not stream:
        choice = answer.choices[0]
        message = choice.message
        assert answer.usage.completion_tokens_details is None  # not counted
        return (getattr(message, "reasoning_content", None), message.content,
                [(c.function.name, c.function.arguments) for c in message.tool_calls or ()],
                choice.finish_reason)
    deltas = streamed_deltas(list(answer))
    reasoning = "".join(text for kind, text in deltas if kind == "reasoning_content")
    content = "".join(text for kind, text in deltas if kind == "content")
    calls = [[name, ""] for kind, name in deltas if kind == "call"]
    for kind, text in deltas:
        if kind == "arguments":
            calls[-1][1] += text
    return reasoning or None, content or None, [tuple(c) for c in calls], deltas[-1][1]


def streamed_deltas(chunks) -> list[tuple[str, str]]:
    """Each chunk's (kind, text) after the role chunk, in order: reasoning_content, content,
    call (its name), arguments, finish (its reason)."""
    out = []
    for chunk in chunks[1:]:
        (choice,) = chunk.choices
        delta = choice.delta
        for kind in ("reasoning_content", "content"):
            if getattr(delta, kind, None):
                out.append((kind, getattr(delta, kind)))
        for call in delta.tool_calls or ():
            out.append(("call", call.function.name) if call.id else
                       ("arguments", call.function.arguments))
        if choice.finish_reason:
            out.append(("finish", choice.finish_reason))
    return out


def test_a_chat_answers_reasoning_content_and_the_call_from_the_content(client):
    assert chat(client, tools=TOOLS) == (REASONING, None, [("get_weather", CALL_ARGUMENTS)],
                                         "tool_calls")


def test_a_streamed_chat_sends_reasoning_deltas_then_the_call(client):
    chunks = list(client.chat.completions.create(
        model="tiny", messages=MESSAGES, tools=TOOLS, temperature=0, max_tokens=32,
        stream=True))
    assert chunks[0].choices[0].delta.role == "assistant"
    # one delta per token: ' weather?', then ' ' before ' </think>'; ' <tool_call>' opens
    # the call's block, its name opens the call, its arguments stream
    assert streamed_deltas(chunks) == [
        ("reasoning_content", " weather?"), ("reasoning_content", " "), ("call", "get_weather"),
        ("arguments", '{"city": '), ("arguments", '"Paris"}'), ("finish", "tool_calls")]


@pytest.mark.parametrize("stream", [False, True])
def test_without_tools_the_call_is_content_after_the_reasoning(client, stream):
    assert chat(client, stream) == (REASONING, f" {CALL_TEXT}", [], "stop")


@pytest.mark.parametrize("stream", [False, True])
def test_a_cut_inside_the_reasoning_is_all_reasoning(client, stream):
    assert chat(client, stream, tools=TOOLS, max_tokens=2) == (" weather?", None, [], "length")


@pytest.mark.parametrize("stream", [False, True])
def test_thinking_off_through_chat_template_kwargs_makes_all_content(client, stream):
    """The template writes `<think> </think>` after the generation prompt: the prompt
    closed the reasoning, so the output (the call) is content, and parsed as a call."""
    off = {"chat_template_kwargs": {"enable_thinking": False}}
    assert chat(client, stream, extra_body=off) == (None, CALL_TEXT, [], "stop")
    assert chat(client, stream, tools=TOOLS, extra_body=off) == (
        None, None, [("get_weather", CALL_ARGUMENTS)], "tool_calls")
    usage = client.chat.completions.create(model="tiny", messages=MESSAGES, temperature=0,
                                           max_tokens=1, extra_body=off).usage
    assert usage.prompt_tokens == 4  # hello go <think> </think>


@pytest.mark.parametrize("kwargs, param", [
    ([1, 2], "chat_template_kwargs"),
    ("thinking", "chat_template_kwargs"),
    ({"tokenize": False}, "chat_template_kwargs.tokenize"),
    ({"add_generation_prompt": False}, "chat_template_kwargs.add_generation_prompt"),
    ({"padding": "x" * (16 << 10)}, "chat_template_kwargs.padding"),
    ({"notes": "x" * (16 << 10)}, "chat_template_kwargs"),
])
@pytest.mark.parametrize("api", ["chat", "responses"])
def test_a_bad_chat_template_kwargs_is_a_400_naming_it(client, api, kwargs, param):
    with pytest.raises(openai.BadRequestError) as info:
        if api == "chat":
            client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=1,
                                           extra_body={"chat_template_kwargs": kwargs})
        else:
            client.responses.create(model="tiny", input="hello", max_output_tokens=1,
                                    extra_body={"chat_template_kwargs": kwargs})
    assert info.value.body["param"] == param


def test_a_response_has_a_reasoning_item_before_its_call(client):
    response = client.responses.create(model="tiny", input="hello", tools=RESPONSE_TOOLS,
                                       temperature=0)
    reasoning, call = response.model_dump(exclude_none=True)["output"]
    assert reasoning == {"type": "reasoning", "id": f"rs_{response.id}_0", "summary": [],
                         "content": [{"type": "reasoning_text", "text": REASONING}],
                         "status": "completed"}
    assert (call["type"], call["id"], call["name"], call["arguments"]) == (
        "function_call", f"fc_{response.id}_1", "get_weather", CALL_ARGUMENTS)
    assert response.usage.output_tokens_details.reasoning_tokens is None  # not counted


def test_a_streamed_response_sends_the_reasoning_events_first(client):
    with client.responses.stream(model="tiny", input="hello", tools=RESPONSE_TOOLS,
                                 temperature=0) as stream:
        events = list(stream)
        final = stream.get_final_response()
    reasoning_id = f"rs_{final.id}_0"
    assert [(e.type, getattr(e, "delta", None)) for e in events[:9]] == [
        ("response.created", None), ("response.in_progress", None),
        ("response.output_item.added", None), ("response.content_part.added", None),
        ("response.reasoning_text.delta", " weather?"), ("response.reasoning_text.delta", " "),
        ("response.reasoning_text.done", None), ("response.content_part.done", None),
        ("response.output_item.done", None)]
    assert {e.item_id if hasattr(e, "item_id") else e.item.id for e in events[2:9]} == \
        {reasoning_id}
    assert (events[6].text, events[7].part.text, events[7].part.type) == (
        REASONING, REASONING, "reasoning_text")
    assert [e.type for e in events[9:]] == [
        "response.output_item.added", "response.function_call_arguments.delta",
        "response.function_call_arguments.delta", "response.function_call_arguments.done",
        "response.output_item.done", "response.completed"]
    assert [item.type for item in final.output] == ["reasoning", "function_call"]
    assert final.output[0].content[0].text == REASONING


def test_thinking_off_through_a_responses_chat_template_kwargs_makes_all_content(client):
    response = client.responses.create(
        model="tiny", input="hello", temperature=0,
        extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    assert [item.type for item in response.output] == ["message"]
    assert response.output_text == CALL_TEXT
    assert response.usage.input_tokens == 4  # hello go <think> </think>
    assert response.usage.output_tokens_details.reasoning_tokens == 0


def test_a_response_cut_in_its_reasoning_has_an_incomplete_reasoning_item(client):
    response = client.responses.create(model="tiny", input="hello", max_output_tokens=2)
    assert response.status == "incomplete"
    assert [(item.type, item.status) for item in response.output] == [
        ("reasoning", "incomplete"), ("message", "completed")]
    assert response.output[0].content[0].text == " weather?"


@pytest.mark.parametrize("items, input_tokens", [
    # hello <think> weather? </think> sunny go: the reasoning reaches the template with
    # the assistant turn (the call) after it
    ([{"role": "user", "content": "hello"},
      {"type": "reasoning", "id": "rs_1", "summary": [],
       "content": [{"type": "reasoning_text", "text": "weather?"}]},
      {"type": "function_call", "call_id": "call_1", "name": "get_weather",
       "arguments": CALL_ARGUMENTS},
      {"type": "function_call_output", "call_id": "call_1", "output": "sunny"}], 6),
    # no assistant turn after it (a user message), or no text: dropped
    ([{"type": "reasoning", "id": "rs_1", "summary": [],
       "content": [{"type": "reasoning_text", "text": "weather?"}]},
      {"role": "user", "content": "hello"}], 2),
    ([{"role": "user", "content": "hello"},
      {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "x"}],
       "encrypted_content": "opaque"},
      {"role": "assistant", "content": "sunny"}], 3),
])
def test_a_reasoning_item_in_the_input_is_the_next_assistant_turns_reasoning(
        client, items, input_tokens):
    response = client.responses.create(model="tiny", input=items, max_output_tokens=1)
    assert response.usage.input_tokens == input_tokens


def test_a_stored_responses_reasoning_is_carried_into_its_continuation(client):
    first = client.responses.create(model="tiny", input="hello", tools=RESPONSE_TOOLS,
                                    temperature=0)
    call_id = first.output[1].call_id
    second = client.responses.create(
        model="tiny", previous_response_id=first.id, tools=RESPONSE_TOOLS, max_output_tokens=1,
        input=[{"type": "function_call_output", "call_id": call_id, "output": "sunny"}])
    # tools hello <think> weather? </think> sunny go: the stored reasoning item rendered
    assert second.usage.input_tokens == 7


def test_a_model_whose_tokenizer_lacks_the_markers_is_refused_at_start(tool_call_model_dir):
    with pytest.raises(ValueError) as info:
        start_server(server_config(tool_call_model_dir), port=None, http_port=0,
                     reasoning_parser="qwen3")
    assert str(info.value) == ("reasoning_parser: reasoning parser 'qwen3' needs '<think>' as "
                               "one token, and the model's vocabulary has no such token")
