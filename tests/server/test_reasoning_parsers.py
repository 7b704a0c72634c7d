"""The reasoning parsers (server/reasoning_parsers/): each format's exact split of whole outputs,
the exact fragments of a few streams, and (hypothesis) that a stream cut anywhere folds back to
what `parse` gives on the whole, whatever the text."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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


def test_the_content_is_what_the_tool_parser_reads():
    text = f"<think>I could call {CALL}.</think>{CALL}"
    reasoning, content = reasoning_parser_class("qwen3")().parse(text)
    assert reasoning == f"I could call {CALL}."
    parsed = make_tool_parser("hermes").parse(content)
    assert parsed.content is None
    assert [(c.name, c.arguments) for c in parsed.tool_calls] == [("f", '{"a": 1}')]


PIECES = ["<think>", "</think>", "<", "</", "<th", "</thi", "think>", "k>", ">", " ", "\n",
          "a", "é🌍", "<tool_call>", '{"name": "f"}', "</tool_call>"]


@st.composite
def cut_outputs(draw) -> tuple[str, list[str]]:
    """An output (marker-rich pieces, or any text) and its split at random cut points (empty
    deltas included)."""
    text = draw(st.one_of(st.lists(st.sampled_from(PIECES), max_size=12).map("".join),
                          st.text(max_size=30)))
    cuts = sorted(draw(st.lists(st.integers(0, len(text)), max_size=8)))
    bounds = [0, *cuts, len(text)]
    return text, [text[a:b] for a, b in zip(bounds, bounds[1:])]


@pytest.mark.parametrize("name", sorted(REASONING_PARSERS))
@settings(max_examples=400, deadline=None)
@given(output=cut_outputs())
def test_any_split_streams_what_parse_gives(name, output):
    text, pieces = output
    parser = reasoning_parser_class(name)()
    reasoning, content = parser.parse(text)
    assert fold(stream(parser, pieces)) == (reasoning or "", content or "")
