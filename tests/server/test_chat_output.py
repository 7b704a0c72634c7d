"""A chat output through the door's parsers (server/chat_output.py): reasoning split off first,
tool calls read from the content only; the exact split and fragments of a few outputs, and
(hypothesis) that any split of any output into deltas streams what `parse` gives whole."""

from __future__ import annotations

import functools

import pytest
from hypothesis import given, settings
from tool_parser_helpers import cut_outputs, make
from tool_parser_helpers import fold as fold_calls

from server.chat_output import ChatOutput, OutputParsers
from server.reasoning_parsers import reasoning_parser_class
from server.tool_parsers import ToolCall

CALL = '<tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call>'
QWEN3 = reasoning_parser_class("qwen3")


def parsers(reasoning: bool = True, tools: str | None = "hermes", parallel: bool = True,
            in_content: bool = False) -> OutputParsers:
    """Qwen3's reasoning parser (its call marker hermes's when `tools` is), and tool parser
    `tools` with counter ids (call_0, call_1, ... for each output)."""
    marker = "<tool_call>" if tools == "hermes" else None
    return OutputParsers(functools.partial(QWEN3, in_content, marker) if reasoning else None,
                         functools.partial(make, tools) if tools else None, parallel)


def stream(pipeline: OutputParsers, pieces: list[str]) -> list[dict]:
    out = pipeline.stream()
    return [f for piece in pieces for f in out.feed(piece)] + out.finish()


def fold(fragments: list[dict]) -> ChatOutput:
    """What a client builds from the fragments (reasoning, content, calls), checking that
    each reasoning fragment has text and comes before any other fragment."""
    reasoning = ""
    rest = []
    for fragment in fragments:
        if "reasoning_content" in fragment:
            assert fragment.keys() == {"reasoning_content"} and fragment["reasoning_content"]
            assert not rest, fragments
            reasoning += fragment["reasoning_content"]
        else:
            rest.append(fragment)
    content, calls = fold_calls(rest)
    return ChatOutput(reasoning, content, calls)


@pytest.mark.parametrize(("pipeline", "text", "expected"), [
    (parsers(), f"<think>Weather: {CALL}?</think>\n{CALL}",
     ChatOutput(f"Weather: {CALL}?", None, (ToolCall("call_0", "f", '{"a": 1}'),))),
    (parsers(), f"<think>Weather.{CALL}", ChatOutput("Weather.", None, (
        ToolCall("call_0", "f", '{"a": 1}'),))),  # a call right from the reasoning
    (parsers(parallel=False), f"<think>a</think>b{CALL}{CALL}",
     ChatOutput("a", "b", (ToolCall("call_0", "f", '{"a": 1}'),))),
    (parsers(tools=None), f"<think>a</think>{CALL}", ChatOutput("a", CALL)),
    (parsers(tools=None), f"<think>a{CALL}", ChatOutput(f"a{CALL}", None)),  # no tool format
    (parsers(in_content=True), f"Hi{CALL}", ChatOutput(None, "Hi", (
        ToolCall("call_0", "f", '{"a": 1}'),))),
    (parsers(reasoning=False), f"<think>a</think>{CALL}", ChatOutput(None, "<think>a</think>", (
        ToolCall("call_0", "f", '{"a": 1}'),))),
    (parsers(tools=None), "<think>\n\n</think>\n\n", ChatOutput(None, "\n\n")),
])
def test_parse_splits_reasoning_then_reads_calls_from_the_content(pipeline, text, expected):
    assert pipeline.parse(text) == expected


def test_a_stream_sends_reasoning_then_content_and_calls_as_decided():
    pieces = ["<think>Hm", "m.</think>Ok", '<tool_call>{"name": "f", ', '"arguments": {"a": 1}}',
              "</tool_call>"]
    out = parsers().stream()
    assert [out.feed(p) for p in pieces] + [out.finish()] == [
        [{"reasoning_content": "Hm"}],
        [{"reasoning_content": "m."}, {"content": "Ok"}],
        [{"tool_calls": [{"index": 0, "id": "call_0", "type": "function",
                          "function": {"name": "f", "arguments": ""}}]}],
        [{"tool_calls": [{"index": 0, "function": {"arguments": '{"a": 1}'}}]}],
        [], []]
    assert out.made_calls


def test_a_delta_that_decides_nothing_sends_one_empty_fragment_only_when_asked():
    out = parsers().stream()
    assert (out.feed("<thi"), out.feed("", send_empty=True)) == ([], [{}])
    assert not out.made_calls


def test_parallel_false_streams_the_first_call_only():
    out = parsers(parallel=False).stream()
    fragments = out.feed(f"</think>{CALL}{CALL}") + out.finish()
    assert {f["tool_calls"][0]["index"] for f in fragments} == {0}


PIECES = ["<think>", "</think>", "<", "</", "<th", "think>", "<tool_call>", "</tool_call>",
          '{"name": "f", "arguments": {"a": [1, "x"]}}', '{"name": "g"', ', "arguments": {}}',
          "{", "}", " ", "\n", "a", "é", '"']


@pytest.mark.parametrize("options", [
    {}, {"parallel": False}, {"in_content": True}, {"tools": None}, {"reasoning": False},
    {"tools": "llama3_json"}, {"tools": "pythonic"}])
@settings(max_examples=250, deadline=None)
@given(output=cut_outputs(PIECES, 14))
def test_any_split_streams_what_parse_gives(options, output):
    text, pieces = output
    pipeline = parsers(**options)
    whole = pipeline.parse(text)
    assert fold(stream(pipeline, pieces)) == ChatOutput(
        whole.reasoning or "", whole.content or "", whole.tool_calls)
