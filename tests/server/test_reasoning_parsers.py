"""The reasoning parsers (server/reasoning_parsers/): each format's exact split of whole outputs
(a call marker ending an unclosed reasoning, a prompt that closed it), the exact fragments of
a few streams, and (hypothesis) that a stream cut anywhere folds back to what `parse` gives on
the whole, whatever the text."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from tool_parser_helpers import cut_outputs

from server.reasoning_parsers import REASONING_PARSERS, ReasoningParser, reasoning_parser_class
from server.tool_parsers import make_tool_parser

CALL = '<tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call>'

# (output, (reasoning, content)), the same for both names: vLLM's qwen3 and deepseek_r1 both
# start inside the reasoning and end it at the first </think>.
THINK_CASES = [
    ("<think>\nI should greet.\n</think>\n\nHello!", ("\nI should greet.\n", "\n\nHello!")),
    ("I should greet.</think>Hello!", ("I should greet.", "Hello!")),  # <think> in the prompt
    ("Hello!", ("Hello!", None)),  # no markers: all reasoning
    ("<think>\n\n</think>\n\nHello!", (None, "\n\nHello!")),  # empty block: thinking off
    ("<think></think>Hi", (None, "Hi")),
    ("<think>Let me think about", ("Let me think about", None)),  # cut inside the reasoning
    ("<think>abc</thi", ("abc</thi", None)),  # cut inside the end marker: text
    ("<think>abc</think>", ("abc", None)),
    ("<think>abc</think>\n", ("abc", "\n")),
    ("", (None, None)),
    (" \n", (None, None)),
    ("\n<think>abc</think>x", ("\nabc", "x")),  # text before <think> stays reasoning
    ("a<think>b<think>c</think>d", ("abc", "d")),  # <think> in the reasoning is dropped
    ("a</think>b</think>c<think>d", ("a", "bc<think>d")),  # in the content: </think> dropped
    (f"<think>Maybe {CALL}? No.</think>Done.", (f"Maybe {CALL}? No.", "Done.")),
    (f"<think>Weather.</think>\n{CALL}", ("Weather.", f"\n{CALL}")),
    ("<think>a < b </ c <th</think>1 </ 2", ("a < b </ c <th", "1 </ 2")),
]


def stream(parser: ReasoningParser, pieces: list[str]) -> list[dict]:
    """Every fragment of feeding `pieces` in order, then finishing."""
    return [f for piece in pieces for f in parser.feed(piece)] + parser.finish()


def fold(fragments: list[dict]) -> tuple[str, str]:
    """(the concatenated reasoning, the concatenated content) of `fragments`, checking that
    each has one key and text, and that no reasoning follows content."""
    reasoning = content = ""
    for fragment in fragments:
        [(key, text)] = fragment.items()
        assert key in ("reasoning_content", "content") and text, fragments
        if key == "reasoning_content":
            assert not content, fragments
            reasoning += text
        else:
            content += text
    return reasoning, content


def test_the_registry_has_vllms_names_and_refuses_others():
    assert sorted(REASONING_PARSERS) == ["deepseek_r1", "qwen3"]
    assert reasoning_parser_class("qwen3").markers == ("<think>", "</think>")
    with pytest.raises(ValueError, match="unknown reasoning parser 'qwen'; supported: "
                                         "deepseek_r1, qwen3"):
        reasoning_parser_class("qwen")


@pytest.mark.parametrize("name", ["qwen3", "deepseek_r1"])
@pytest.mark.parametrize(("text", "expected"), THINK_CASES)
def test_parse_splits_each_output_exactly(name, text, expected):
    assert reasoning_parser_class(name)().parse(text) == expected


@pytest.mark.parametrize(("pieces", "fragments"), [
    (["<thi", "nk>ab", "c</", "think>", "x"],  # markers split across deltas
     [[], [{"reasoning_content": "ab"}], [{"reasoning_content": "c"}], [], [{"content": "x"}],
      []]),
    (["<think>", "\n", "Hmm", "</think>"],  # whitespace-only reasoning held, then sent
     [[], [], [{"reasoning_content": "\nHmm"}], [], []]),
    (["<think>", "\n\n", "</think>", "\n\nHi"],  # an empty block: no reasoning at all
     [[], [], [], [{"content": "\n\nHi"}], []]),
    (["abc</thi"], [[{"reasoning_content": "abc"}], [{"reasoning_content": "</thi"}]]),
    (["a</think>b<", "/think>c"], [[{"reasoning_content": "a"}, {"content": "b"}],
                                   [{"content": "c"}], []]),
    (["x</think>y<think>"], [[{"reasoning_content": "x"}, {"content": "y<think>"}], []]),
])
def test_a_stream_sends_each_fragment_once_decided(pieces, fragments):
    parser = reasoning_parser_class("qwen3")()
    assert [parser.feed(piece) for piece in pieces] + [parser.finish()] == fragments


# (output, (reasoning, content)) with hermes's call marker: an unclosed reasoning ends at it.
CALL_MARKER_CASES = [
    (f"<think>Weather.{CALL}", ("Weather.", CALL)),  # a call right from the reasoning
    (f"Weather.\n{CALL}\nDone", ("Weather.\n", f"{CALL}\nDone")),
    (f"<think>Maybe {CALL}? No.</think>Done.", (f"Maybe {CALL}? No.", "Done.")),  # closed
    (f"<think>a</think>{CALL}", ("a", CALL)),
    (f"<think>\n{CALL}", (None, CALL)),  # whitespace-only reasoning is none
    ("<think>a<tool_call>b<think>c", ("a", "<tool_call>b<think>c")),  # <think> in the call
    ("<think>a<tool_call>b<think>c</think>d", ("a<tool_call>bc", "d")),
    ("a<tool_cal", ("a<tool_cal", None)),  # no marker: all reasoning
]


@pytest.mark.parametrize("name", ["qwen3", "deepseek_r1"])
@pytest.mark.parametrize(("text", "expected"), CALL_MARKER_CASES)
def test_a_call_marker_ends_an_unclosed_reasoning(name, text, expected):
    assert reasoning_parser_class(name)(call_marker="<tool_call>").parse(text) == expected


def test_a_stream_holds_a_call_marker_back_until_the_reasoning_closes_or_ends():
    closed = reasoning_parser_class("qwen3")(call_marker="<tool_call>")
    assert [closed.feed(p) for p in ["a<tool_", "call>b", "</think>c"]] + [closed.finish()] \
        == [[{"reasoning_content": "a"}], [], [{"reasoning_content": "<tool_call>b"},
                                              {"content": "c"}], []]
    unclosed = reasoning_parser_class("qwen3")(call_marker="<tool_call>")
    assert [unclosed.feed(p) for p in ["a<tool_call>", "b"]] + [unclosed.finish()] \
        == [[{"reasoning_content": "a"}], [], [{"content": "<tool_call>b"}]]


@pytest.mark.parametrize(("tail", "closes"), [
    ("<|im_start|>assistant\n<think>\n\n</think>\n\n", True),  # Qwen3, thinking off
    ("Assistant:</think>", True),
    ("<|im_start|>assistant\n<think>\n", False),  # thinking on, <think> in the prompt
    ("<|im_start|>assistant\n", False),
    ("</think> then more", False),
])
def test_a_prompt_ending_with_the_end_marker_closes_the_reasoning(tail, closes):
    assert reasoning_parser_class("qwen3").closes_reasoning(tail) is closes


@pytest.mark.parametrize(("text", "expected"), [
    ("Hello!", (None, "Hello!")),
    ("<think>a</think>b", (None, "<think>ab")),  # in the content: </think> dropped
    (f"\n{CALL}", (None, f"\n{CALL}")),
])
def test_an_output_after_a_closing_prompt_is_all_content(text, expected):
    assert reasoning_parser_class("qwen3")(in_content=True).parse(text) == expected


def test_the_content_is_what_the_tool_parser_reads():
    text = f"<think>I could call {CALL}.</think>{CALL}"
    reasoning, content = reasoning_parser_class("qwen3")().parse(text)
    assert reasoning == f"I could call {CALL}."
    parsed = make_tool_parser("hermes").parse(content)
    assert parsed.content is None
    assert [(c.name, c.arguments) for c in parsed.tool_calls] == [("f", '{"a": 1}')]


PIECES = ["<think>", "</think>", "<", "</", "<th", "</thi", "think>", "k>", ">", " ", "\n",
          "a", "é🌍", "<tool_call>", '{"name": "f"}', "</tool_call>"]


@pytest.mark.parametrize("name", sorted(REASONING_PARSERS))
@pytest.mark.parametrize(("in_content", "call_marker"), [(False, None), (False, "<tool_call>"),
                                                         (True, None)])
@settings(max_examples=300, deadline=None)
@given(output=cut_outputs(PIECES, 12))
def test_any_split_streams_what_parse_gives(name, in_content, call_marker, output):
    text, pieces = output
    parser = reasoning_parser_class(name)(in_content, call_marker)
    reasoning, content = parser.parse(text)
    assert fold(stream(parser, pieces)) == (reasoning or "", content or "")
