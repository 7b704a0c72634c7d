"""The `llama3_json` and `pythonic` tool-call formats: exact parses and exact stream fragments,
a call opening once its name is known and its arguments streaming as they are written."""

from __future__ import annotations

import pytest
from tool_parser_helpers import make, stream

from server.tool_parsers import ParsedOutput, ToolCall
from server.tool_parsers.base import call_arguments, call_opening

F = '{"name": "f", "parameters": {"a": 1}}'
G = '{"name": "g", "arguments": {"b": "ü"}}'


def test_llama3_one_call():
    text = '{"name": "get_weather", "parameters": {"city": "Paris"}}'
    assert make("llama3_json").parse(text) == ParsedOutput(
        None, (ToolCall("call_0", "get_weather", '{"city": "Paris"}'),)
    )
    assert stream(make("llama3_json"), [text[:20], text[20:]]) == [
        call_opening(0, "call_0", "get_weather"),
        call_arguments(0, '{"city": "Paris"}'),
    ]


def test_llama3_tag_and_two_calls_each_opened_once_its_name_is_known():
    text = f"<|python_tag|>{F}; {G}"
    assert make("llama3_json").parse(text) == ParsedOutput(
        None, (ToolCall("call_0", "f", '{"a": 1}'), ToolCall("call_1", "g", '{"b": "ü"}'))
    )
    parser = make("llama3_json")
    assert parser.feed("<|python") == []
    assert parser.feed("_tag|>" + F) == [
        call_opening(0, "call_0", "f"),
        call_arguments(0, '{"a": 1}'),
    ]
    assert parser.feed("; ") == []
    assert parser.feed('{"name": "g"') == [call_opening(1, "call_1", "g")]
    assert parser.feed(', "arguments": {"b": "') == [call_arguments(1, '{"b": "')]
    assert parser.feed('ü"}') == [call_arguments(1, 'ü"}')]
    assert parser.feed("}") == []
    assert parser.finish() == []


def test_llama3_no_call_streams_as_content_once_the_start_rules_a_call_out():
    assert make("llama3_json").parse("The weather is fine.") == ParsedOutput(
        "The weather is fine.", ()
    )
    parser = make("llama3_json")
    assert parser.feed("  \n") == []
    assert parser.feed("The") == [{"content": "  \nThe"}]
    assert parser.feed(" end") == [{"content": " end"}]
    assert parser.finish() == []


def test_llama3_content_before_a_call_makes_it_all_content():
    text = "Sure: " + F
    assert make("llama3_json").parse(text) == ParsedOutput(text, ())
    assert stream(make("llama3_json"), [text]) == [{"content": text}]


def test_llama3_malformed_json_before_the_name_is_content():
    text = '{"parameters": {"a": }, "name": "f"}'
    assert make("llama3_json").parse(text) == ParsedOutput(text, ())
    parser = make("llama3_json")
    assert parser.feed(text) == [{"content": text}]
    assert parser.finish() == []


def test_llama3_malformed_arguments_after_the_name_pass_through_raw():
    text = '{"name": "f", "parameters": {"a": }}; {"name": "g", "parameters": {}}'
    assert make("llama3_json").parse(text) == ParsedOutput(
        None, (ToolCall("call_0", "f", '{"a": }'), ToolCall("call_1", "g", "{}"))
    )
    parser = make("llama3_json")
    assert parser.feed('{"name": "f", "parameters": {"a": ') == [
        call_opening(0, "call_0", "f"),
        call_arguments(0, '{"a": '),
    ]
    assert parser.feed("}") == [call_arguments(0, "}")]


def test_llama3_unterminated_object_is_a_call_with_the_arguments_so_far():
    text = '<|python_tag|>{"name": "f", "parameters": {"a": 1, "b": "x'
    assert make("llama3_json").parse(text) == ParsedOutput(
        None, (ToolCall("call_0", "f", '{"a": 1, "b": "x'),)
    )
    parser = make("llama3_json")
    assert parser.feed(text) == [
        call_opening(0, "call_0", "f"),
        call_arguments(0, '{"a": 1, "b": "x'),
    ]
    assert parser.finish() == []


def test_llama3_object_cut_before_its_name_is_held_then_content():
    text = '<|python_tag|>{"parameters": {"a": 1}, "na'
    assert make("llama3_json").parse(text) == ParsedOutput(text, ())
    parser = make("llama3_json")
    assert parser.feed(text) == []
    assert parser.finish() == [{"content": text}]


def test_llama3_text_after_a_call_is_content_from_the_separator():
    text = F + "; and more"
    assert make("llama3_json").parse(text) == ParsedOutput(
        "; and more", (ToolCall("call_0", "f", '{"a": 1}'),)
    )
    parser = make("llama3_json")
    assert parser.feed(F + " ") == [call_opening(0, "call_0", "f"), call_arguments(0, '{"a": 1}')]
    assert parser.feed(";") == []
    assert parser.feed(" and more") == [{"content": " ; and more"}]


@pytest.mark.parametrize(
    ("rest", "content"),
    [
        (";\n", None),
        ("  ", None),
        (" ;", None),
        (";;", ";;"),
        (" " + G, " " + G),  # a second call must follow a `;`
        ('; {"name', '; {"name'),
        ('; {"answer": 42}', '; {"answer": 42}'),
    ],
)
def test_llama3_what_follows_a_call(rest, content):
    assert make("llama3_json").parse(F + rest) == ParsedOutput(
        content, (ToolCall("call_0", "f", '{"a": 1}'),)
    )


@pytest.mark.parametrize(
    "text",
    [
        '{"answer": 42}',
        '{"name": "", "parameters": {}}',
        "<|python_tag|>",
        "<|python",
        '<|python_tag|>brave_search.call(query="x")',
        "{",
        "",
    ],
)
def test_llama3_output_that_does_not_start_with_a_call_is_content(text):
    assert make("llama3_json").parse(text) == ParsedOutput(text or None, ())


@pytest.mark.parametrize(
    ("text", "arguments"),
    [
        ('{"name": "f", "parameters": {}, "arguments": {"a": 1}}', "{}"),
        ('{"name": "f", "arguments": {"a": 1}, "parameters": {}}', '{"a": 1}'),
        ('{"name": "f", "parameters": [1]}', "[1]"),
        ('{"name": "f", "parameters": {"x": 1e999}}', '{"x": 1e999}'),
        ('{"name": "f"}', "{}"),
    ],
)
def test_llama3_object_is_a_call_once_its_name_is_known(text, arguments):
    """The first arguments key counts; arguments not a JSON object pass through raw."""
    assert make("llama3_json").parse(text) == ParsedOutput(
        None, (ToolCall("call_0", "f", arguments),)
    )


def test_llama3_braces_inside_strings_do_not_end_the_object():
    text = '{"name": "f", "parameters": {"code": "if (x) { y(\\"}\\") }"}}'
    assert make("llama3_json").parse(text).tool_calls == (
        ToolCall("call_0", "f", '{"code": "if (x) { y(\\"}\\") }"}'),
    )


def test_pythonic_call_opens_at_its_paren_and_streams_argument_by_argument():
    text = '[get_weather(city="Paris", unit="c")]'
    assert make("pythonic").parse(text) == ParsedOutput(
        None, (ToolCall("call_0", "get_weather", '{"city": "Paris", "unit": "c"}'),)
    )
    parser = make("pythonic")
    assert parser.feed("[get_weather") == []
    assert parser.feed("(") == [call_opening(0, "call_0", "get_weather")]
    assert parser.feed('city="Par') == []
    assert parser.feed('is", ') == [call_arguments(0, '{"city": "Paris"')]
    assert parser.feed('unit="c"') == []
    assert parser.feed(")") == [call_arguments(0, ', "unit": "c"}')]
    assert parser.feed("]") == []
    assert parser.finish() == []


def test_pythonic_two_calls_with_every_literal_kind():
    text = ' [f(a=1, b=-2.5, c=True, d=None), g(items=[1, "x"], opts={"k": "ü"}), h()]\n'
    assert make("pythonic").parse(text) == ParsedOutput(
        None,
        (
            ToolCall("call_0", "f", '{"a": 1, "b": -2.5, "c": true, "d": null}'),
            ToolCall("call_1", "g", '{"items": [1, "x"], "opts": {"k": "ü"}}'),
            ToolCall("call_2", "h", "{}"),
        ),
    )


def test_pythonic_no_call_streams_as_content_at_once():
    assert make("pythonic").parse("Hello there") == ParsedOutput("Hello there", ())
    parser = make("pythonic")
    assert parser.feed(" ") == []
    assert parser.feed("Hello") == [{"content": " Hello"}]
    assert parser.feed(" there") == [{"content": " there"}]
    assert parser.finish() == []


def test_pythonic_content_before_a_call_makes_it_all_content():
    text = "Calling: [f(x=1)]"
    assert make("pythonic").parse(text) == ParsedOutput(text, ())


def test_pythonic_text_starting_with_a_bracket_is_content_once_no_call_can_open():
    parser = make("pythonic")
    assert parser.feed(" [") == []
    assert parser.feed("f") == []
    assert parser.feed("oo bar") == [{"content": " [foo bar"}]
    assert parser.feed("]") == [{"content": "]"}]
    assert parser.finish() == []


@pytest.mark.parametrize(
    "text",
    [
        "[a.b(x=1)]",
        "[None(x=1)]",
        "[]",
        "[1] footnote",
        "f(x=1)",
        "[" * 500 + "]" * 500,
    ],
)
def test_pythonic_output_that_does_not_begin_with_a_call_is_content(text):
    assert make("pythonic").parse(text) == ParsedOutput(text, ())


@pytest.mark.parametrize(
    ("text", "content", "arguments"),
    [
        ("[f(1)]", None, "1"),
        ("[f(x=1, x=2)]", None, '{"x": 1, "x": 2}'),
        ("[f(**kw)]", None, "**kw"),
        ("[f(x=y)]", None, "x=y"),
        ("[f(x=(1, 2))]", None, "x=(1, 2)"),
        ("[f(x={1, 2})]", None, "x={1, 2}"),
        ("[f(x={1: 2})]", None, "x={1: 2}"),
        ("[f(x=b'1')]", None, "x=b'1'"),
        ("[f(x=1j)]", None, "x=1j"),
        ("[f(x=1e999)]", None, "x=1e999"),
        ("[f(x=float('nan'))]", None, "x=float('nan')"),
        ("[f(x={[1]: 2})]", None, "x={[1]: 2}"),
        ("[f(a=1, b=y, c=2)]", None, '{"a": 1, b=y, c=2'),
        ("[f(a=1,)]", None, '{"a": 1}'),
        ("[f(x='''a'b,)''', y=\"c)\\\"\")]", None, '{"x": "a\'b,)", "y": "c)\\""}'),
        ("[f(x=1)", None, '{"x": 1}'),
        ("[f(x=1, y=[2", None, '{"x": 1'),
        ("[f(x=1),", None, '{"x": 1}'),
        ("[f(x=1)] trailing", " trailing", '{"x": 1}'),
        ("[f(x=1)]; [g()]", "; [g()]", '{"x": 1}'),
        ("[f(x=1) g()]", " g()]", '{"x": 1}'),
        ("[f(x=1), 3]", ", 3]", '{"x": 1}'),
    ],
)
def test_pythonic_call_stays_a_call_once_open(text, content, arguments):
    """An argument that is no keyword literal: the rest of the list passes through raw; an
    output cut inside a call: the arguments complete so far; text that does not go on to a
    call: content from just past the last `)`, or after the `]`."""
    assert make("pythonic").parse(text) == ParsedOutput(
        content, (ToolCall("call_0", "f", arguments),)
    )


def test_pythonic_unicode_arguments():
    [call] = make("pythonic").parse("[f(city='Zürich', e='🌍', esc='\\u00e9')]").tool_calls
    assert call.arguments == '{"city": "Zürich", "e": "🌍", "esc": "é"}'
