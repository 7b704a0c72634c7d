"""The Responses API (`/v1/responses`) with the official `openai` SDK, on the model that answers
every chat with one hermes-style tool call (tests/tool_call_model.py): text and function-call
output items, input items of every supported kind reaching the chat template, the streamed
event sequence, output item ids (unique in a response, the same scheme streamed or not; a
reasoning item's too: reasoning over HTTP is tests/server/test_http_reasoning.py), and a 400 naming each field the server cannot honour or that is malformed
(structured `text.format` itself: tests/server/test_http_structured.py)."""

from __future__ import annotations

import json

import openai
import pytest
from tool_call_model import CALL_ARGUMENTS as ARGUMENTS, CALL_TEXT

from engine import CompletionOutput
from server.chat_output import ChatOutput
from server.openai_responses import ResponseEvents, ResponsesRequest, output_items
from server.tool_parsers import ToolCall
from test_http_tools import client, model_dir  # noqa: F401  (fixtures: the hermes server)

TOOLS = [{"type": "function", "name": "get_weather", "description": "the weather",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]


def create(client, **body):
    return client.responses.create(model="tiny", temperature=0, max_output_tokens=32, **body)


def item_id(event) -> str:
    """The id of the output item a streamed event is about."""
    return event.item.id if hasattr(event, "item") else event.item_id


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
    assert item.id == f"msg_{response.id}_0"


def test_a_tool_call_is_a_function_call_item(client):
    response = create(client, input="hello", tools=TOOLS)
    (item,) = response.output
    assert (item.type, item.name, item.arguments, item.status) == (
        "function_call", "get_weather", ARGUMENTS, "completed")
    assert item.call_id.startswith("call_")
    assert item.id == f"fc_{response.id}_0"
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
    assert {item_id(e) for e in events[2:-1]} == {final.output[0].id} == {f"msg_{final.id}_0"}


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
    assert {item_id(e) for e in events[2:-1]} == {item.id} == {f"fc_{final.id}_0"}


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
    (dict(input=[{"type": "web_search_call", "id": "ws_1"}]), "input[0].type"),
    (dict(input=[{"role": "critic", "content": "x"}]), "input[0].role"),
    (dict(input=[{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]),
     "input[0].content[0]"),
])
def test_what_the_server_cannot_honour_is_a_400_naming_it(client, body, param):
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model="tiny", **{"input": "hello", **body})
    assert info.value.body["param"] == param


RESPONSE_ID = "resp_call-1"
CALLS = (ToolCall("call_a", "get_weather", ARGUMENTS), ToolCall("call_b", "get_time", "{}"))


def finished(text: str, finish_reason: str = "stop") -> CompletionOutput:
    return CompletionOutput(call_id="call-1", prompt_token_ids=[1, 2], token_ids=[3],
                            text=text, finish_reason=finish_reason, num_cached_tokens=0,
                            num_preemptions=0, queue_seconds=0.0, service_seconds=0.0,
                            arrival_time=0.0, first_token_time=None, finish_time=0.0)


def streamed(*fragments: dict, finish_reason: str = "stop") -> list[dict]:
    """The payloads of a response's events, streamed as `fragments` (chat deltas)."""
    events = ResponseEvents(ResponsesRequest(input="hello"), RESPONSE_ID, "tiny", 0)
    sse = events.start() + [e for f in fragments for e in events.fragment(f)]
    sse += events.finish(finished("", finish_reason))
    return [json.loads(event.split("data: ", 1)[1]) for event in sse]


def opened(call: ToolCall) -> list[dict]:
    """A tool parser's fragments for `call`: its opening, then its arguments."""
    return [{"tool_calls": [{"index": 0, "id": call.id, "type": "function",
                             "function": {"name": call.name, "arguments": ""}}]},
            {"tool_calls": [{"index": 0, "function": {"arguments": call.arguments}}]}]


def test_output_item_ids_are_the_same_streamed_or_not():
    """Text, then two calls: `{msg|fc}_{response id}_{output index}` in the non-streamed
    output, in every streamed event and in the streamed response.completed."""
    expected = [f"msg_{RESPONSE_ID}_0", f"fc_{RESPONSE_ID}_1", f"fc_{RESPONSE_ID}_2"]
    whole = output_items(RESPONSE_ID, finished("ignored"), ChatOutput(None, "Let me look.", CALLS))
    assert [item["id"] for item in whole] == expected
    payloads = streamed({"content": "Let me look."}, *opened(CALLS[0]), *opened(CALLS[1]))
    assert [p["response"]["output"] for p in payloads if p["type"] == "response.completed"] \
        == [whole]
    assert {(p["output_index"], p.get("item_id") or p["item"]["id"])
            for p in payloads if "output_index" in p} == set(enumerate(expected))


def test_two_messages_of_one_streamed_response_have_ids_of_their_own():
    """Text after a call opens a second message: it gets its own id."""
    payloads = streamed({"content": "Let me look."}, *opened(CALLS[0]), {"content": "Done."})
    (completed,) = [p["response"] for p in payloads if p["type"] == "response.completed"]
    assert [item["id"] for item in completed["output"]] == [
        f"msg_{RESPONSE_ID}_0", f"fc_{RESPONSE_ID}_1", f"msg_{RESPONSE_ID}_2"]


def test_arguments_stream_in_deltas_and_a_call_the_token_limit_cut_is_incomplete():
    """Argument fragments are `function_call_arguments.delta` events, then one `.done` with
    the whole arguments; cut by the limit, the response is incomplete and so is its last
    item (a call), streamed or not, while the call before it is completed."""
    call = ToolCall("call_a", "get_weather", '{"city": "Par')
    (opening, _), arguments = opened(call), ['{"city": ', '"Par']
    payloads = streamed(*opened(CALLS[1]), opening,
                        *({"tool_calls": [{"index": 1, "function": {"arguments": a}}]}
                          for a in arguments), finish_reason="length")
    assert [(p["type"], p.get("delta", p.get("arguments"))) for p in payloads[6:]] == [
        ("response.output_item.added", None),
        ("response.function_call_arguments.delta", '{"city": '),
        ("response.function_call_arguments.delta", '"Par'),
        ("response.function_call_arguments.done", '{"city": "Par'),
        ("response.output_item.done", None),
        ("response.incomplete", None),
    ]
    whole = output_items(RESPONSE_ID, finished("", "length"),
                         ChatOutput(None, None, (CALLS[1], call)))
    assert [item["status"] for item in whole] == ["completed", "incomplete"]
    assert payloads[-1]["response"]["output"] == whole
    assert payloads[-1]["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
    text_only = output_items(RESPONSE_ID, finished("Cut", "length"), ChatOutput(None, "Cut"))
    assert [item["status"] for item in text_only] == ["completed"]  # messages keep theirs


def test_a_reasoning_item_comes_first_the_same_streamed_or_not():
    """Reasoning, text, a call: `rs_`, `msg_`, `fc_` items, the reasoning's text in one
    `reasoning_text` part; its tokens not counted. Cut inside the reasoning, the reasoning
    is incomplete and an empty message follows it."""
    expected = [f"rs_{RESPONSE_ID}_0", f"msg_{RESPONSE_ID}_1", f"fc_{RESPONSE_ID}_2"]
    whole = output_items(RESPONSE_ID, finished("ignored"), ChatOutput("Hm.", "Ok.", CALLS[:1]))
    assert [item["id"] for item in whole] == expected
    assert whole[0] == {"type": "reasoning", "id": expected[0], "summary": [],
                        "content": [{"type": "reasoning_text", "text": "Hm."}],
                        "status": "completed"}
    payloads = streamed({"reasoning_content": "H"}, {"reasoning_content": "m."},
                        {"content": "Ok."}, *opened(CALLS[0]))
    assert [(p["type"], p.get("delta")) for p in payloads[2:9]] == [
        ("response.output_item.added", None), ("response.content_part.added", None),
        ("response.reasoning_text.delta", "H"), ("response.reasoning_text.delta", "m."),
        ("response.reasoning_text.done", None), ("response.content_part.done", None),
        ("response.output_item.done", None)]
    (completed,) = [p["response"] for p in payloads if p["type"] == "response.completed"]
    assert completed["output"] == whole
    assert completed["usage"]["output_tokens_details"] == {}
    cut = output_items(RESPONSE_ID, finished("", "length"), ChatOutput("Hm", None))
    assert [(item["type"], item["status"]) for item in cut] == [("reasoning", "incomplete"),
                                                                ("message", "completed")]
    assert streamed({"reasoning_content": "Hm"}, finish_reason="length")[-1]["response"][
        "output"] == cut
