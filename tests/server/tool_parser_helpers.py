"""Helpers for the output-parser tests: counter ids, streaming a text in given pieces, random
outputs cut into deltas, and folding the delta fragments of a stream back into (content,
calls) to compare with `parse` (or, for the door tests, the openai SDK's tool-call deltas
into calls)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable

from hypothesis import strategies as st

from server.tool_parsers import TOOL_PARSERS, ToolCall, ToolParser


def counter_ids() -> Callable[[], str]:
    """Ids call_0, call_1, ... in order."""
    numbers = itertools.count()
    return lambda: f"call_{next(numbers)}"


def make(name: str) -> ToolParser:
    """Parser `name` with counter ids."""
    return TOOL_PARSERS[name](counter_ids())


def stream(parser: ToolParser, pieces: Iterable[str]) -> list[dict]:
    """Every fragment of feeding `pieces` in order, then finishing."""
    fragments = [f for piece in pieces for f in parser.feed(piece)]
    return fragments + parser.finish()


def fold(fragments: list[dict]) -> tuple[str, tuple[ToolCall, ...]]:
    """(the concatenated content, the calls) that a client would build from `fragments`,
    checking the shape of each fragment on the way."""
    content = ""
    calls: list[list[str]] = []  # [id, name, arguments] by index
    for fragment in fragments:
        if "content" in fragment:
            assert fragment.keys() == {"content"} and fragment["content"]
            content += fragment["content"]
            continue
        [delta] = fragment["tool_calls"]
        if "id" in delta:
            assert delta["index"] == len(calls) and delta["type"] == "function"
            assert delta["function"]["arguments"] == ""
            calls.append([delta["id"], delta["function"]["name"], ""])
        else:
            assert delta.keys() == {"index", "function"}
            assert delta["function"].keys() == {"arguments"}
            calls[delta["index"]][2] += delta["function"]["arguments"]
    return content, tuple(ToolCall(*call) for call in calls)


def splits(text: str, max_pieces: int) -> Iterable[list[str]]:
    """`text` cut at every set of up to `max_pieces - 1` character boundaries."""
    for cuts in range(max_pieces):
        for points in itertools.combinations(range(1, len(text)), cuts):
            bounds = (0, *points, len(text))
            yield [text[a:b] for a, b in zip(bounds, bounds[1:])]


def joined_calls(deltas) -> list[tuple[str, str]]:
    """(name, arguments) of each call an openai SDK stream's tool-call deltas make, its
    argument deltas joined, by index."""
    calls: dict[int, list[str]] = {}
    for delta in deltas:
        name, arguments = calls.setdefault(delta.index, ["", ""])
        calls[delta.index] = [name + (delta.function.name or ""),
                              arguments + (delta.function.arguments or "")]
    return [tuple(calls[i]) for i in sorted(calls)]


@st.composite
def cut_outputs(draw, pieces: list[str], max_pieces: int) -> tuple[str, list[str]]:
    """An output (up to `max_pieces` of `pieces`, or any text) and its split at random cut
    points (empty deltas included)."""
    text = draw(st.one_of(st.lists(st.sampled_from(pieces), max_size=max_pieces).map("".join),
                          st.text(max_size=30)))
    cuts = sorted(draw(st.lists(st.integers(0, len(text)), max_size=8)))
    bounds = [0, *cuts, len(text)]
    return text, [text[a:b] for a, b in zip(bounds, bounds[1:])]
