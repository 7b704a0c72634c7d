"""The tool-parser interface and registry, and the `hermes` format: exact parses and exact
stream fragments (the other formats are in test_tool_parsers_formats.py, and the stream/parse
agreement over every split in test_tool_parsers_agreement.py)."""

from __future__ import annotations

import dataclasses
import re

import pytest
from tool_parser_helpers import counter_ids, make, stream

from server.tool_parsers import TOOL_PARSERS, ParsedOutput, ToolCall, make_tool_parser
from server.tool_parsers.base import call_arguments, call_opening
from server.tool_parsers.hermes import HermesToolParser

WEATHER = '{"name": "get_weather", "arguments": {"city": "Paris"}}'


def block(body: str) -> str:
    return f"<tool_call>\n{body}\n</tool_call>"


def test_registry_names_vllm_formats_and_is_read_only():
    assert sorted(TOOL_PARSERS) == ["hermes", "llama3_json", "pythonic"]
    with pytest.raises(TypeError):
        TOOL_PARSERS["mine"] = HermesToolParser  # type: ignore[index]


def test_make_tool_parser_gives_a_fresh_parser_with_random_ids():
    parser = make_tool_parser("hermes")
    assert type(parser) is HermesToolParser and parser is not make_tool_parser("hermes")
    [call] = parser.parse(block(WEATHER)).tool_calls
    assert re.fullmatch(r"call_[0-9a-f]{24}", call.id)


def test_unknown_parser_is_refused_with_the_supported_names():
    with pytest.raises(ValueError) as error:
        make_tool_parser("mistral")
    assert str(error.value) == (
        "unknown tool call parser 'mistral'; supported: hermes, llama3_json, pythonic"
    )


def test_tool_call_to_openai_and_frozen_values():
    call = ToolCall("call_0", "f", '{"a": 1}')
    assert call.to_openai() == {
        "id": "call_0",
        "type": "function",
        "function": {"name": "f", "arguments": '{"a": 1}'},
    }
    with pytest.raises(dataclasses.FrozenInstanceError):
        call.name = "g"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        ParsedOutput(None, ()).content = "x"  # type: ignore[misc]


def test_fragment_shapes():
    function = {"name": "f", "arguments": ""}
    opening = {"index": 1, "id": "call_7", "type": "function", "function": function}
    assert call_opening(1, "call_7", "f") == {"tool_calls": [opening]}
    more = {"index": 1, "function": {"arguments": "{}"}}
    assert call_arguments(1, "{}") == {"tool_calls": [more]}


def test_hermes_one_call():
    assert make("hermes").parse(block(WEATHER)) == ParsedOutput(
        None, (ToolCall("call_0", "get_weather", '{"city": "Paris"}'),)
    )
    parser = make("hermes")
    assert parser.feed('<tool_call>\n{"name": "get_weather", ') == []
    assert parser.feed('"arguments": {"city": "Paris"}}\n</tool_call>') == [
        call_opening(0, "call_0", "get_weather"),
        call_arguments(0, '{"city": "Paris"}'),
    ]
    assert parser.finish() == []


def test_hermes_two_calls_with_content_before_between_and_after():
    text = (
        'A<tool_call>{"name": "f", "arguments": {}}</tool_call>B'
        '<tool_call>{"name": "g", "arguments": {"x": [1, 2]}}</tool_call>C'
    )
    assert make("hermes").parse(text) == ParsedOutput(
        "ABC", (ToolCall("call_0", "f", "{}"), ToolCall("call_1", "g", '{"x": [1, 2]}'))
    )
    assert stream(make("hermes"), [text]) == [
        {"content": "A"},
        call_opening(0, "call_0", "f"),
        call_arguments(0, "{}"),
        {"content": "B"},
        call_opening(1, "call_1", "g"),
        call_arguments(1, '{"x": [1, 2]}'),
        {"content": "C"},
    ]


def test_hermes_content_before_a_call_streams_at_once():
    parser = make("hermes")
    assert parser.feed("Let me check. <tool") == [{"content": "Let me check. "}]
    assert parser.feed("_call>" + WEATHER) == []
    assert parser.feed("</tool_call>") == [
        call_opening(0, "call_0", "get_weather"),
        call_arguments(0, '{"city": "Paris"}'),
    ]
    assert parser.finish() == []


def test_hermes_no_call_is_content():
    assert make("hermes").parse("Just text.") == ParsedOutput("Just text.", ())
    assert stream(make("hermes"), ["Just ", "text."]) == [
        {"content": "Just "},
        {"content": "text."},
    ]


def test_hermes_marker_split_across_deltas_never_leaks():
    parser = make("hermes")
    assert parser.feed("<tool") == []
    assert parser.feed("_ca") == []
    assert parser.feed('ll>{"name": "f", "arguments": {"a": 1}}</tool') == []
    assert parser.feed("_call>") == [call_opening(0, "call_0", "f"), call_arguments(0, '{"a": 1}')]
    assert parser.finish() == []


def test_hermes_held_text_is_released_once_it_cannot_be_a_marker():
    parser = make("hermes")
    assert parser.feed("a <") == [{"content": "a "}]
    assert parser.feed("b") == [{"content": "<b"}]
    assert parser.feed(" <tool_c") == [{"content": " "}]
    assert parser.finish() == [{"content": "<tool_c"}]


def test_hermes_malformed_json_is_content_and_parsing_goes_on():
    bad = '<tool_call>{"name": "f", "arguments": {"a": }}</tool_call>'
    text = bad + " then " + block(WEATHER)
    assert make("hermes").parse(text) == ParsedOutput(
        bad + " then ", (ToolCall("call_0", "get_weather", '{"city": "Paris"}'),)
    )
    assert stream(make("hermes"), [text]) == [
        {"content": bad + " then "},
        call_opening(0, "call_0", "get_weather"),
        call_arguments(0, '{"city": "Paris"}'),
    ]


def test_hermes_unterminated_block_is_content():
    text = 'Sure <tool_call>{"name": "f", "arguments": {}}'
    assert make("hermes").parse(text) == ParsedOutput(text, ())
    parser = make("hermes")
    assert parser.feed(text) == [{"content": "Sure "}]
    assert parser.finish() == [{"content": '<tool_call>{"name": "f", "arguments": {}}'}]


@pytest.mark.parametrize(
    "body",
    [
        '{"arguments": {}}',
        '{"name": "", "arguments": {}}',
        '{"name": 3, "arguments": {}}',
        '{"name": "f"}',
        '{"name": "f", "arguments": [1]}',
        '{"name": "f", "arguments": "{}"}',
        '{"name": "f", "arguments": {"x": NaN}}',
        '{"name": "f", "arguments": {"x": 1e999}}',
        '[{"name": "f", "arguments": {}}]',
        '{"name": "f", "arguments": {}} {"name": "g", "arguments": {}}',
        '{"name": "f", "arguments": {"deep": ' + "[" * 5000 + "]" * 5000 + "}}",
        "",
    ],
)
def test_hermes_body_that_is_not_one_call_is_content(body):
    text = f"<tool_call>{body}</tool_call>"
    assert make("hermes").parse(text) == ParsedOutput(text, ())


def test_hermes_whitespace_only_content_is_none_and_never_streamed():
    text = "\n" + block(WEATHER) + "\n \n"
    assert make("hermes").parse(text).content is None
    assert stream(make("hermes"), list(text)) == [
        call_opening(0, "call_0", "get_weather"),
        call_arguments(0, '{"city": "Paris"}'),
    ]


def test_hermes_unicode_arguments_stay_unescaped():
    body = '{"name": "f", "arguments": {"city": "Zürich", "e": "🌍", "esc": "\\u00e9"}}'
    [call] = make("hermes").parse(block(body)).tool_calls
    assert call.arguments == '{"city": "Zürich", "e": "🌍", "esc": "é"}'
    lone = '{"name": "f", "arguments": {"s": "\\ud800"}}'
    [call] = make("hermes").parse(block(lone)).tool_calls
    assert call.arguments == '{"s": "\\ud800"}'  # escaped: the text must encode as UTF-8


def test_parse_leaves_a_stream_in_progress_alone():
    parser = HermesToolParser(counter_ids())
    assert parser.feed("x <tool_call>") == [{"content": "x "}]
    assert parser.parse("plain") == ParsedOutput("plain", ())
    assert parser.feed(WEATHER + "</tool_call>") == [
        call_opening(0, "call_0", "get_weather"),
        call_arguments(0, '{"city": "Paris"}'),
    ]
