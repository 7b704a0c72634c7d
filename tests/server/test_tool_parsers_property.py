"""Streaming agrees with `parse` for every parser (the three formats and the forced choices)
on random outputs (calls in any JSON formatting, arguments before the name, text around them,
malformed text, markers, outputs cut anywhere) split into deltas at random points: the content
fragments concatenate to the parsed content, and each call's fragments give the parsed call,
name, id, arguments and order alike (hypothesis). A whole valid call's arguments are
`dump_json` of its arguments, as a non-streamed response has always carried them."""

from __future__ import annotations

import json
from collections.abc import Callable

from hypothesis import given, settings
from hypothesis import strategies as st
from tool_parser_helpers import counter_ids, fold, stream

from server.tool_parsers import TOOL_PARSERS, ToolParser
from server.tool_parsers.canonical_json import dump_json
from server.tool_parsers.forced import ForcedCallParser

LEAVES = (st.none() | st.booleans() | st.integers(-1000, 10**20)
          | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=6))
VALUES = st.recursive(LEAVES, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.text(max_size=4), inner, max_size=3), max_leaves=6)
ARGUMENTS = st.dictionaries(st.text(max_size=5), VALUES, max_size=3)
KEYWORD_ARGUMENTS = st.dictionaries(st.from_regex(r"[a-z_][a-z0-9_]{0,5}", fullmatch=True)
                                    .filter(lambda k: k not in ("if", "in", "is", "or", "as")),
                                    VALUES, max_size=3)
NAMES = st.sampled_from(["f", "get_weather", "ünï", "a b"])
FORMATS = st.sampled_from([{}, {"indent": 1}, {"separators": (",", ":")},
                           {"ensure_ascii": False}])
JUNK = {"hermes": '<>/tool_call{}[]":, \nab\\',
        "llama3_json": '<|python_tag|>{}[]":;, \nab\\',
        "pythonic": "[](){}=,'\" \nab\\"}


def call_json(name: str, arguments: dict, key: str, fmt: dict, swapped: bool) -> str:
    members = [("name", name), (key, arguments)]
    return json.dumps(dict(members[::-1] if swapped else members), **fmt)


@st.composite
def hermes_part(draw) -> str:
    kind = draw(st.sampled_from(["call", "text", "junk"]))
    if kind == "text":
        return draw(st.text(alphabet="ab <>\n", max_size=6))
    if kind == "junk":
        return "<tool_call>" + draw(st.text(alphabet=JUNK["hermes"], max_size=12))
    body = call_json(draw(NAMES), draw(ARGUMENTS), "arguments", draw(FORMATS), draw(st.booleans()))
    return f"<tool_call>{draw(st.sampled_from(['', chr(10)]))}{body}\n</tool_call>"


@st.composite
def llama3_output(draw) -> str:
    calls = [call_json(draw(NAMES), draw(ARGUMENTS), draw(st.sampled_from(["parameters",
                                                                          "arguments"])),
                       draw(FORMATS), draw(st.booleans()))
             for _ in range(draw(st.integers(1, 3)))]
    tag = draw(st.sampled_from(["", "<|python_tag|>", " "]))
    return tag + draw(st.sampled_from(["; ", ";", " ; "])).join(calls) + draw(
        st.text(alphabet=JUNK["llama3_json"], max_size=8))


@st.composite
def pythonic_output(draw) -> str:
    calls = []
    for _ in range(draw(st.integers(1, 3))):
        arguments = draw(KEYWORD_ARGUMENTS)
        spaced = draw(st.booleans())
        calls.append(draw(st.sampled_from(["f", "get_time"])) + "(" + (", " if spaced else ",")
                     .join(f"{k}={v!r}" for k, v in arguments.items()) + ")")
    return "[" + ", ".join(calls) + "]" + draw(st.text(alphabet=JUNK["pythonic"], max_size=8))


@st.composite
def required_output(draw) -> str:
    items = [{"name": draw(NAMES), "parameters": draw(ARGUMENTS)}
             for _ in range(draw(st.integers(1, 3)))]
    return json.dumps(items, **draw(FORMATS))


OUTPUTS: dict[str, tuple[Callable[[], ToolParser], st.SearchStrategy[str]]] = {
    "hermes": (lambda: TOOL_PARSERS["hermes"](counter_ids()),
               st.lists(hermes_part(), max_size=4).map("".join)),
    "llama3_json": (lambda: TOOL_PARSERS["llama3_json"](counter_ids()),
                    llama3_output() | st.text(alphabet=JUNK["llama3_json"], max_size=30)),
    "pythonic": (lambda: TOOL_PARSERS["pythonic"](counter_ids()),
                 pythonic_output() | st.text(alphabet=JUNK["pythonic"], max_size=30)),
    "forced named": (lambda: ForcedCallParser("f", counter_ids()),
                     st.builds(json.dumps, ARGUMENTS)),
    "forced required": (lambda: ForcedCallParser(None, counter_ids()), required_output()),
}


@st.composite
def split_output(draw) -> tuple[Callable[[], ToolParser], list[str]]:
    """(a parser's maker, an output of its format, maybe cut short, split into deltas)."""
    name = draw(st.sampled_from(sorted(OUTPUTS)))
    make, outputs = OUTPUTS[name]
    text = draw(outputs)
    text = text[:draw(st.integers(0, len(text)))] if draw(st.booleans()) else text
    cuts = sorted(draw(st.lists(st.integers(0, len(text)), max_size=8)))
    bounds = [0, *cuts, len(text)]
    return make, [text[a:b] for a, b in zip(bounds, bounds[1:])]


@settings(max_examples=600, deadline=None)
@given(split_output())
def test_stream_split_anywhere_agrees_with_parse(case):
    make, pieces = case
    parsed = make().parse("".join(pieces))
    assert fold(stream(make(), pieces)) == (parsed.content or "", parsed.tool_calls)


@settings(max_examples=200, deadline=None)
@given(NAMES, st.lists(ARGUMENTS, min_size=1, max_size=3), FORMATS, st.booleans(),
       KEYWORD_ARGUMENTS)
def test_whole_valid_calls_carry_dump_json_of_their_arguments(name, arguments, fmt, swapped,
                                                             keywords):
    pythonic = "[g(" + ", ".join(f"{k}={v!r}" for k, v in keywords.items()) + ")]"
    [call] = TOOL_PARSERS["pythonic"]().parse(pythonic).tool_calls
    assert call.arguments == dump_json(keywords)
    expected = tuple((name, dump_json(a)) for a in arguments)
    hermes = "".join(f"<tool_call>{call_json(name, a, 'arguments', fmt, swapped)}</tool_call>"
                     for a in arguments)
    llama3 = "; ".join(call_json(name, a, "parameters", fmt, swapped) for a in arguments)
    required = json.dumps([{"name": name, "parameters": a} for a in arguments], **fmt)
    for parser, text in ((TOOL_PARSERS["hermes"](), hermes),
                         (TOOL_PARSERS["llama3_json"](), llama3),
                         (ForcedCallParser(None), required)):
        assert tuple((c.name, c.arguments) for c in parser.parse(text).tool_calls) == expected
    [call] = ForcedCallParser(name).parse(json.dumps(arguments[0], **fmt)).tool_calls
    assert call.arguments == expected[0][1]
