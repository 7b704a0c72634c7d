"""A chat output through its request's parsers, whole or streamed: the reasoning parser (if
any) splits the reasoning off first, and the tool parser (if any) reads calls from the
content part only, so a call written inside the reasoning is reasoning text.

For any split of an output into deltas, the streamed `reasoning_content` fragments
concatenate to `parse`'s reasoning, the `content` fragments to its content ("" for None) and
the tool-call fragments to its calls (each parser's own contract, composed: the tool parser
is fed exactly the content fragments, whose concatenation is the content it parses whole).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from server.reasoning_parsers import CONTENT, ReasoningParser, reasoning_parser_class
from server.tool_parsers import ToolCall, ToolParser

if TYPE_CHECKING:
    from server.prompts import PromptTokenizer

PROMPT_TAIL_TOKENS = 8  # the prompt's last tokens whose text shows whether it closed reasoning
Fragment = dict  # one chat-completion-chunk `delta`


@dataclass(frozen=True)
class ChatOutput:
    """A whole output split: `reasoning` (None: none, or not split), `content` (None when
    empty, or whitespace only once a tool parser read it), `tool_calls` in order."""

    reasoning: str | None
    content: str | None
    tool_calls: tuple[ToolCall, ...] = ()


@dataclass(frozen=True)
class OutputParsers:
    """What a request's outputs go through: `reasoning` makes a reasoning parser (None: no
    split), `tools` a tool parser (None: no calls parsed); `parallel` false keeps the first
    call only (`parallel_tool_calls: false`)."""

    reasoning: Callable[[], ReasoningParser] | None
    tools: Callable[[], ToolParser] | None
    parallel: bool = True

    def parse(self, text: str) -> ChatOutput:
        """A whole output split; never raises."""
        reasoning, content = self.reasoning().parse(text) if self.reasoning else (None, text)
        if self.tools is None:
            return ChatOutput(reasoning, content)
        parsed = self.tools().parse(content or "")
        calls = parsed.tool_calls if self.parallel else parsed.tool_calls[:1]
        return ChatOutput(reasoning, parsed.content, calls)

    def stream(self) -> OutputStream:
        """A fresh stream of one output through these parsers."""
        return OutputStream(self)


class OutputStream:
    """One output streamed through `OutputParsers`: the delta fragments each text delta
    decides ({"reasoning_content": ...}, {"content": ...}, {"tool_calls": [...]}), in
    order; `made_calls` once a call has gone out."""

    def __init__(self, parsers: OutputParsers) -> None:
        self._reasoning = parsers.reasoning() if parsers.reasoning else None
        self._tools = parsers.tools() if parsers.tools else None
        self._parallel = parsers.parallel
        self.made_calls = False

    def feed(self, text: str, send_empty: bool = False) -> list[Fragment]:
        """The fragments `text` decides; one empty fragment when none but the chunk must go
        (`send_empty`: it carries the delta's token ids or logprobs)."""
        if self._reasoning is not None:
            split = self._reasoning.feed(text)
        else:
            split = [{CONTENT: text}] if text else []
        return self._through_tools(split, done=False) or ([{}] if send_empty else [])

    def finish(self) -> list[Fragment]:
        """The fragments of everything still held back, at the end of the output."""
        split = self._reasoning.finish() if self._reasoning is not None else []
        return self._through_tools(split, done=True)

    def _through_tools(self, split: list[Fragment], done: bool) -> list[Fragment]:
        if self._tools is None:
            return split
        out: list[Fragment] = []
        for fragment in split:
            out += self._tools.feed(fragment[CONTENT]) if CONTENT in fragment else [fragment]
        if done:
            out += self._tools.finish()
        kept = [f for f in out if self._parallel or "tool_calls" not in f
                or f["tool_calls"][0]["index"] == 0]
        self.made_calls = self.made_calls or any("tool_calls" in f for f in kept)
        return kept


async def reasoning_parser_for(name: str, prompt_ids: list[int], prompts: PromptTokenizer,
                               call_marker: str | None) -> Callable[[], ReasoningParser]:
    """What makes the reasoning parser `name` of a chat output whose prompt is `prompt_ids`:
    starting in the content when the prompt closed the reasoning (its last
    PROMPT_TAIL_TOKENS tokens' text, decoded off the event loop, says), ending an unclosed
    reasoning at `call_marker` (the request's tool format's, None: none)."""
    parser = reasoning_parser_class(name)
    tail = await prompts.text(prompt_ids[-PROMPT_TAIL_TOKENS:])
    return functools.partial(parser, parser.closes_reasoning(tail), call_marker)
