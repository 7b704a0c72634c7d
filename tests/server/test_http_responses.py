"""The Responses API (`/v1/responses`) with the official `openai` SDK, on the model that answers
every chat with one hermes-style tool call (tests/tool_call_model.py): text and function-call
output items, input items of every supported kind reaching the chat template, the streamed
event sequence, and a 400 naming each field the server cannot honour or that is malformed
(structured `text.format` itself: tests/server/test_http_structured.py)."""

from __future__ import annotations

import openai
import pytest
from tool_call_model import CALL_ARGUMENTS as ARGUMENTS, CALL_TEXT

from test_http_tools import client, model_dir  # noqa: F401  (fixtures: the hermes server)

TOOLS = [{"type": "function", "name": "get_weather", "description": "the weather",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]


def create(client, **body):
    return client.responses.create(model="tiny", temperature=0, max_output_tokens=32, **body)


def test_a_text_answer_is_one_message_item(client):
    response = create(client, input="hello")
    assert (response.object, response.status, response.model) == ("response", "completed",
                                                                   "tiny")
    (item,) = response.output
    assert (item.type, item.role, item.status) == ("message", "assistant", "completed")
    assert [part.text for part in item.content] == [CALL_TEXT]  # no tools: plain text
    assert response.output_text == CALL_TEXT
    assert (response.usage.input_tokens, response.usage.output_tokens) == (2, 8)  # hello go
    assert response.id.startswith("resp_")


def test_a_tool_call_is_a_function_call_item(client):
    response = create(client, input="hello", tools=TOOLS)
    (item,) = response.output
    assert (item.type, item.name, item.arguments, item.status) == (
        "function_call", "get_weather", ARGUMENTS, "completed")
    assert item.call_id.startswith("call_")
    assert response.usage.input_tokens == 3  # "tools hello go": the tools reached the template
    assert response.tools[0].name == "get_weather"


def test_every_input_item_kind_reaches_the_template(client):
    items = [{"role": "developer", "content": "hello"},
             {"role": "user", "content": [{"type": "input_text", "text": "hello"}]},
             {"type": "function_call", "call_id": "call_1", "name": "get_weather",
              "arguments": ARGUMENTS},
             {"type": "function_call_output", "call_id": "call_1", "output": "sunny"}]
    response = create(client, input=items, instructions="hello")
    # "hello hello hello sunny go": instructions, developer, user, the call's empty content,
    # the tool's output, the generation prompt.
    assert response.usage.input_tokens == 5
    assert response.instructions == "hello"


def test_a_streamed_text_answer_sends_the_api_events(client):
    with client.responses.stream(model="tiny", input="hello", temperature=0,
                                 max_output_tokens=32) as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [e.type for e in events]
    assert kinds[:4] == ["response.created", "response.in_progress",
                         "response.output_item.added", "response.content_part.added"]
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done",
                          "response.output_item.done", "response.completed"]
    assert set(kinds[4:-4]) == {"response.output_text.delta"}
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == \
        CALL_TEXT
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert final.output_text == CALL_TEXT and final.status == "completed"


def test_a_streamed_tool_call_sends_argument_deltas(client):
    with client.responses.stream(model="tiny", input="hello", tools=TOOLS, temperature=0,
                                 max_output_tokens=32) as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [e.type for e in events]
    assert kinds[0:3] == ["response.created", "response.in_progress",
                          "response.output_item.added"]
    assert events[2].item.type == "function_call" and events[2].item.name == "get_weather"
    assert kinds[-3:] == ["response.function_call_arguments.done",
                          "response.output_item.done", "response.completed"]
    assert "".join(e.delta for e in events
                   if e.type == "response.function_call_arguments.delta") == ARGUMENTS
    (item,) = final.output
    assert (item.type, item.arguments) == ("function_call", ARGUMENTS)


def test_a_response_cut_by_the_token_limit_is_incomplete(client):
    response = client.responses.create(model="tiny", input="hello", max_output_tokens=2)
    assert response.status == "incomplete"
    assert response.incomplete_details.reason == "max_output_tokens"


@pytest.mark.parametrize("body, param", [
    (dict(previous_response_id="resp_1"), "previous_response_id"),
    (dict(text={"format": {"type": "json_schema", "name": "x"}}), "text.format.schema"),
    (dict(text={"format": {"type": "json_schema", "name": "x", "schema": "object"}}),
     "text.format.schema"),
    (dict(text={"format": {"type": "xml"}}), "text.format.type"),
    (dict(tools=[{"type": "web_search"}]), "tools"),
    (dict(input=[{"type": "reasoning", "summary": []}]), "input[0].type"),
    (dict(input=[{"role": "critic", "content": "x"}]), "input[0].role"),
    (dict(input=[{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]),
     "input[0].content[0]"),
])
def test_what_the_server_cannot_honour_is_a_400_naming_it(client, body, param):
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model="tiny", **{"input": "hello", **body})
    assert info.value.body["param"] == param
