"""Streaming and `parse` agree on every example of every format, whatever the split: fed in
two pieces cut anywhere, one character at a time, and (for short examples) in three pieces cut
anywhere, the folded fragments give parse's content ("" for None) and calls, ids included."""

from __future__ import annotations

import pytest
from tool_parser_helpers import fold, make, splits, stream

W = '{"name": "get_weather", "arguments": {"city": "Zürich"}}'
F = '{"name": "f", "parameters": {"a": 1}}'

CASES = {
    "hermes": [
        "",
        " \n",
        "Just text.",
        "a < b <tool_ca",
        "</tool_call> stray",
        '<tool_call>{"name": "f", "arguments": {}}</tool_call>',
        f"Let me check.\n<tool_call>\n{W}\n</tool_call>\n<tool_call>\n"
        '{"name": "g", "arguments": {"e": "🌍"}}\n</tool_call>\n',
        f'A<tool_call>{{"name": "f", "arguments": {{}}}}</tool_call>B<tool_call>{W}</tool_call>C',
        '<tool_call>{"name": "f", "arguments": {"a": }}</tool_call> then',
        '<tool_call>{"name": "f"}</tool_call>',
        'x <tool_call>{"name": "f", "arguments": {}}',
        f"<tool_call>x<tool_call>{W}</tool_call>",
        f"<tool_call><tool_call>{W}</tool_call></tool_call>",
        f"\n<tool_call>{W}</tool_call>\n<<tool_call>",
    ],
    "llama3_json": [
        "",
        "  ",
        "The weather is fine.",
        "<|python",
        "<|python_tag|>",
        "<|python_tag|> hi",
        F,
        f" \n<|python_tag|>{F}; {{\"name\": \"g\", \"arguments\": {{\"b\": \"ü\"}}}};\n",
        "Sure: " + F,
        '{"name": "f", "parameters": {"a": }}',
        '{"name": "f", "parameters": {"a": 1}',
        F + "; and more",
        F + " " + F,
        F + "; " + F[:-1],
        F + ";;",
        '{"name": "f", "parameters": {"code": "} { \\"}"}}',
        '{"answer": 42}',
    ],
    "pythonic": [
        "",
        " ",
        "Hello there",
        "[1] footnote",
        '[get_weather(city="Zürich", unit="c")]',
        ' [f(a=1, b=-2.5, c=True, d=None), g(items=[1, "x"], opts={"k": "🌍"})]\n',
        "[f(x=1, x=2)]",
        "[f(x=1)",
        "[f(x=1)] trailing",
        "Calling: [f(x=1)]",
        "[]",
    ],
}
SHORT = 40  # examples up to this length are also cut in three pieces everywhere


def ways(text: str) -> list[list[str]]:
    return [*splits(text, 3 if len(text) <= SHORT else 2), list(text)]


@pytest.mark.parametrize(
    ("name", "text"), [(name, text) for name, texts in CASES.items() for text in texts]
)
def test_stream_agrees_with_parse_at_every_split(name, text):
    parsed = make(name).parse(text)
    expected = (parsed.content or "", parsed.tool_calls)
    for pieces in ways(text):
        assert fold(stream(make(name), pieces)) == expected, pieces
