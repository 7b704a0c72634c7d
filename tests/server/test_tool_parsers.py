"""The tool-parser interface and registry, and the `hermes` format: exact parses and exact
stream fragments, a call opening once its name is known and its arguments streaming as they
are written (the other formats are in test_tool_parsers_formats.py and
test_tool_parsers_forced.py, and the stream/parse agreement over every split in
test_tool_parsers_agreement.py and test_tool_parsers_property.py)."""

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
    assert parser.feed('<tool_call>\n{"name": "get_weather') == []
    assert parser.feed('", ') == [call_opening(0, "call_0", "get_weather")]
    assert parser.feed('"arguments": {"city": "Paris"}}\n</tool_call>') == [
        call_arguments(0, '{"city": "Paris"}'),
    ]
    assert parser.finish() == []


def test_hermes_arguments_stream_as_the_model_writes_them():
    """Token by token (the words of tests/tool_call_model.py): the call opens once the name's
    string closes, each argument token adds its canonical text, and a number waits for the
    character after it."""
    parser = make("hermes")
    steps = [
        ("<tool_call>", []),
        (' {"name":', []),
        (' "get_weather",', [call_opening(0, "call_0", "get_weather")]),
        (' "arguments":', []),
        (' {"city":', [call_arguments(0, '{"city": ')]),
        (' "Par', [call_arguments(0, '"Par')]),
        ('is", "days":', [call_arguments(0, 'is", "days": ')]),
        (" 1", []),
        ("0}}", [call_arguments(0, "10}")]),
        (" </tool_call>", []),
    ]
    assert [(delta, parser.feed(delta)) for delta, _ in steps] == steps
    assert parser.finish() == []


def test_hermes_arguments_before_the_name_are_held_until_the_name_is_known():
    parser = make("hermes")
    assert parser.feed('<tool_call>{"arguments": {"a": [1, ') == []
    assert parser.feed('2]}, "name": "f"') == [
        call_opening(0, "call_0", "f"),
        call_arguments(0, '{"a": [1, 2]}'),
    ]
    assert parser.feed("}</tool_call>") == []
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
    assert parser.feed("_call>" + WEATHER) == [
        call_opening(0, "call_0", "get_weather"),
        call_arguments(0, '{"city": "Paris"}'),
    ]
    assert parser.feed("</tool_call>") == []
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
    assert parser.feed('ll>{"name": "f", "arguments": {"a": 1}}</tool') == [
        call_opening(0, "call_0", "f"),
        call_arguments(0, '{"a": 1}'),
    ]
    assert parser.feed("_call>") == []
    assert parser.finish() == []


def test_hermes_text_that_may_end_the_body_is_held_inside_a_string():
    parser = make("hermes")
    assert parser.feed('<tool_call>{"name": "f", "arguments": {"a": "x</tool') == [
        call_opening(0, "call_0", "f"),
        call_arguments(0, '{"a": "x'),
    ]
    assert parser.feed('s>"}}</tool_call>') == [call_arguments(0, '</tools>"}')]
    assert parser.finish() == []


def test_hermes_held_text_is_released_once_it_cannot_be_a_marker():
    parser = make("hermes")
    assert parser.feed("a <") == [{"content": "a "}]
    assert parser.feed("b") == [{"content": "<b"}]
    assert parser.feed(" <tool_c") == [{"content": " "}]
    assert parser.finish() == [{"content": "<tool_c"}]


def test_hermes_malformed_json_before_the_name_is_content_and_parsing_goes_on():
    bad = '<tool_call>{"arguments": {"a": }, "name": "f"}</tool_call>'
    text = bad + " then " + block(WEATHER)
    assert make("hermes").parse(text) == ParsedOutput(
        bad + " then ", (ToolCall("call_0", "get_weather", '{"city": "Paris"}'),)
    )
    assert stream(make("hermes"), [text]) == [
        {"content": bad + " then "},
        call_opening(0, "call_0", "get_weather"),
        call_arguments(0, '{"city": "Paris"}'),
    ]


def test_hermes_malformed_arguments_after_the_name_pass_through_raw():
    """The call stays a call (its arguments then not JSON, as vLLM would send them): the
    canonical text up to the fault, then the raw text to the end of the arguments' value."""
    text = '<tool_call>{"name": "f", "arguments": {"a": 1,  "b": NaN , "c": [2]}}</tool_call> ok'
    assert make("hermes").parse(text) == ParsedOutput(
        " ok", (ToolCall("call_0", "f", '{"a": 1, "b": NaN , "c": [2]}'),)
    )
    parser, cut = make("hermes"), text.index('"b"')
    assert parser.feed(text[:cut]) == [
        call_opening(0, "call_0", "f"),
        call_arguments(0, '{"a": 1, '),
    ]
    assert parser.feed(text[cut:]) == [
        call_arguments(0, '"b": NaN , "c": [2]}'),
        {"content": " ok"},
    ]


def test_hermes_unterminated_last_block_is_a_call():
    text = 'Sure <tool_call>{"name": "f", "arguments": {}}'
    assert make("hermes").parse(text) == ParsedOutput("Sure ", (ToolCall("call_0", "f", "{}"),))
    parser = make("hermes")
    assert parser.feed(text) == [
        {"content": "Sure "},
        call_opening(0, "call_0", "f"),
        call_arguments(0, "{}"),
    ]
    assert parser.finish() == []


@pytest.mark.parametrize(
    ("cut", "arguments"),
    [
        ('{"name": "f"', ""),
        ('{"name": "f", "arguments": {"city": "Par', '{"city": "Par'),
        ('{"name": "f", "arguments": {"n": 12', '{"n": 12'),
        ('{"name": "f", "arguments": {"ok": tr', '{"ok": tr'),
        ('{"name": "f", "arguments": {"s": "a\\u00', '{"s": "a\\u00'),
        ('{"name": "f", "arguments": {"e": "\\ud83c', '{"e": "\\ud83c'),
        ('{"name": "f", "arguments": {"a": 1}, "x', '{"a": 1}'),
    ],
)
def test_hermes_block_cut_after_the_name_is_a_call_with_the_arguments_so_far(cut, arguments):
    """Cut by the end of the output, or by `</tool_call>`: the canonical text so far and the
    raw text of an unfinished token."""
    for text in (f"<tool_call>{cut}", f"<tool_call>{cut}</tool_call>"):
        assert make("hermes").parse(text) == ParsedOutput(
            None, (ToolCall("call_0", "f", arguments),)
        )


def test_hermes_block_cut_before_the_name_is_content():
    text = 'Sure <tool_call>{"name": "f'
    assert make("hermes").parse(text) == ParsedOutput(text, ())
    parser = make("hermes")
    assert parser.feed(text) == [{"content": "Sure "}]
    assert parser.finish() == [{"content": '<tool_call>{"name": "f'}]


@pytest.mark.parametrize(
    "body",
    [
        '{"arguments": {}}',
        '{"name": "", "arguments": {}}',
        '{"name": 3, "arguments": {}}',
        '{"name": ["f"], "arguments": {}}',
        '{"arguments": {"x": NaN}, "name": "f"}',
        '[{"name": "f", "arguments": {}}]',
        '{"name" "f"}',
        "",
    ],
)
def test_hermes_body_that_is_no_call_before_its_name_is_known_is_content(body):
    text = f"<tool_call>{body}</tool_call>"
    assert make("hermes").parse(text) == ParsedOutput(text, ())


@pytest.mark.parametrize(
    ("body", "arguments"),
    [
        ('{"name": "f"}', "{}"),
        ('{"name": "f", "arguments": [1]}', "[1]"),
        ('{"name": "f", "arguments": "{}"}', '"{}"'),
        ('{"name": "f", "arguments": {"x": NaN}}', '{"x": NaN}'),
        ('{"name": "f", "arguments": {"x": 1e999}}', '{"x": 1e999}'),
        ('{"name": "f", "arguments": {}} {"name": "g", "arguments": {}}', "{}"),
        ('{"name": "f", "arguments": {"a": 1}, "arguments": {"b": 2}}', '{"a": 1}'),
        ('{"name": "f", "name": "g", "arguments": {"a": 1, "a": 2}}', '{"a": 1, "a": 2}'),
        ('{"name": "f", 7: 1, "arguments": {"a": 1}}', "{}"),
        ('{"name": "f", "arguments": {"deep": ' + "[" * 5000 + "]" * 5000 + "}}",
         '{"deep": ' + "[" * 5000 + "]" * 5000 + "}"),
    ],
)
def test_hermes_body_is_a_call_once_its_name_is_known_whatever_follows(body, arguments):
    """No arguments: {}; arguments not an object or not JSON: raw; a second `arguments` or
    `name` is ignored and a repeated argument kept; malformed members are skipped to the
    object's end; nesting has no depth limit."""
    text = f"<tool_call>{body}</tool_call>"
    assert make("hermes").parse(text) == ParsedOutput(None, (ToolCall("call_0", "f", arguments),))


def test_hermes_whitespace_only_content_is_none_and_never_streamed():
    text = "\n" + block(WEATHER) + "\n \n"
    assert make("hermes").parse(text).content is None
    arguments = ["{", '"', *"city", '"', ": ", '"', *"Paris", '"', "}"]
    assert stream(make("hermes"), list(text)) == [
        call_opening(0, "call_0", "get_weather"),
        *(call_arguments(0, piece) for piece in arguments),
    ]


def test_hermes_unicode_arguments_stay_unescaped():
    body = '{"name": "f", "arguments": {"city": "Zürich", "e": "🌍", "esc": "\\u00e9"}}'
    [call] = make("hermes").parse(block(body)).tool_calls
    assert call.arguments == '{"city": "Zürich", "e": "🌍", "esc": "é"}'
    lone = '{"name": "f", "arguments": {"s": "\\ud800", "t": "é"}}'
    [call] = make("hermes").parse(block(lone)).tool_calls
    assert call.arguments == '{"s": "\\ud800", "t": "é"}'  # escaped: it must encode as UTF-8


def test_parse_leaves_a_stream_in_progress_alone():
    parser = HermesToolParser(counter_ids())
    assert parser.feed('x <tool_call>{"name": "get_weather", "arguments": {"ci') == [
        {"content": "x "},
        call_opening(0, "call_0", "get_weather"),
        call_arguments(0, '{"ci'),
    ]
    assert parser.parse("plain") == ParsedOutput("plain", ())
    assert parser.feed('ty": "Paris"}}</tool_call>') == [call_arguments(0, 'ty": "Paris"}')]


def test_parse_leaves_a_stream_before_its_first_call_alone():
    parser = HermesToolParser(counter_ids())
    assert parser.feed("x <tool_call>") == [{"content": "x "}]
    assert parser.parse("plain") == ParsedOutput("plain", ())
    assert parser.feed(WEATHER + "</tool_call>") == [
        call_opening(0, "call_0", "get_weather"),
        call_arguments(0, '{"city": "Paris"}'),
    ]
