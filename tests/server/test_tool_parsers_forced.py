"""`ForcedCallParser`: a forced call's constrained output (a named function's arguments, or
"required"'s array of {"name", "parameters"}) read back as calls, streamed as the model
writes them; an output cut by the token limit is a call with the arguments so far, never
content."""

from __future__ import annotations

import pytest
from tool_parser_helpers import counter_ids, stream

from server.tool_parsers import ParsedOutput, ToolCall
from server.tool_parsers.base import call_arguments, call_opening
from server.tool_parsers.forced import ForcedCallParser

PICK = '{"color":"red","n":3}'  # as the grammar spells it: no whitespace
FLAG = '{"on":true}'
REQUIRED = f'[{{"name":"pick","parameters":{PICK}}},{{"name":"flag","parameters":{FLAG}}}]'


def forced(function: str | None) -> ForcedCallParser:
    return ForcedCallParser(function, counter_ids())


def test_a_named_call_opens_at_once_and_streams_its_arguments():
    assert forced("pick").parse(PICK) == ParsedOutput(
        None, (ToolCall("call_0", "pick", '{"color": "red", "n": 3}'),)
    )
    parser = forced("pick")
    assert parser.feed('{"col') == [call_opening(0, "call_0", "pick"), call_arguments(0, '{"col')]
    assert parser.feed('or":"r') == [call_arguments(0, 'or": "r')]
    assert parser.feed('ed","n":3') == [call_arguments(0, 'ed", "n": ')]
    assert parser.feed("}") == [call_arguments(0, "3}")]
    assert parser.feed("\n") == []
    assert parser.finish() == []


@pytest.mark.parametrize(
    ("output", "arguments"),
    [
        ("", ""),
        ('{"color":"re', '{"color": "re'),
        ('{"color":"red","n":3', '{"color": "red", "n": 3'),
        ('{"on":tr', '{"on": tr'),
    ],
)
def test_a_named_call_cut_by_the_token_limit_gives_the_arguments_so_far(output, arguments):
    assert forced("pick").parse(output) == ParsedOutput(
        None, (ToolCall("call_0", "pick", arguments),)
    )


def test_required_calls_each_open_once_their_name_is_known():
    assert forced(None).parse(REQUIRED) == ParsedOutput(None, (
        ToolCall("call_0", "pick", '{"color": "red", "n": 3}'),
        ToolCall("call_1", "flag", '{"on": true}'),
    ))
    parser = forced(None)
    assert parser.feed('[{"name":"pi') == []
    assert parser.feed('ck","parameters":{"color"') == [
        call_opening(0, "call_0", "pick"),
        call_arguments(0, '{"color"'),
    ]
    assert parser.feed(':"red","n":3}}') == [call_arguments(0, ': "red", "n": 3}')]
    assert parser.feed(',{"parameters":{"on":true},') == []
    assert parser.feed('"name":"flag"}]') == [
        call_opening(1, "call_1", "flag"),
        call_arguments(1, '{"on": true}'),
    ]
    assert parser.finish() == []


@pytest.mark.parametrize(
    ("output", "calls"),
    [
        ("", ()),
        ('[{"name":"pi', ()),
        ('[{"name":"pick"', (ToolCall("call_0", "pick", ""),)),
        ('[{"name":"pick","parameters":{"color":"gr',
         (ToolCall("call_0", "pick", '{"color": "gr'),)),
        (REQUIRED[:-1], (ToolCall("call_0", "pick", '{"color": "red", "n": 3}'),
                         ToolCall("call_1", "flag", '{"on": true}'))),
        (f'[{{"name":"pick","parameters":{PICK}}},{{"na',
         (ToolCall("call_0", "pick", '{"color": "red", "n": 3}'),)),
    ],
)
def test_required_calls_cut_by_the_token_limit_are_calls_never_content(output, calls):
    """An element cut before its name is known gives nothing."""
    assert forced(None).parse(output) == ParsedOutput(None, calls)


@pytest.mark.parametrize("output", ["[]", "{}", "x", '[{"parameters":{}}]', "[1]"])
def test_text_the_grammar_does_not_allow_is_dropped(output):
    assert forced(None).parse(output) == ParsedOutput(None, ())
    assert stream(forced(None), list(output)) == []


def test_a_named_call_drops_what_follows_its_object():
    assert forced("flag").parse(FLAG + " trailing") == ParsedOutput(
        None, (ToolCall("call_0", "flag", '{"on": true}'),)
    )
