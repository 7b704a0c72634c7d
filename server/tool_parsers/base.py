"""The tool-call parser interface: a complete output to (content, calls), or a stream of text
deltas to OpenAI chat-completion-chunk delta fragments, the two always agreeing.

A parser's only format-specific part is `_scan`: it decides a prefix of the text it is given
as pieces (plain text, or a `FunctionCall` it found) and leaves the undecided rest for more
text. Both `parse` and the streaming methods run on `_scan`, so a stream split anywhere yields
the same content and calls as `parse` on the whole, provided `_scan` decides each prefix as it
would in the whole text (holding back whatever later text could change). Malformed call text is
a plain-text piece: nothing raises and no character is lost.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from uuid import uuid4

Fragment = dict  # one chat-completion-chunk `delta`, e.g. {"content": "..."}


def new_call_id() -> str:
    """A fresh OpenAI-style call id: "call_" and 24 random hex digits."""
    return "call_" + uuid4().hex[:24]


@dataclass(frozen=True)
class FunctionCall:
    """A call as a parser finds it, before it gets an id: `arguments` is JSON object text."""

    name: str
    arguments: str


@dataclass(frozen=True)
class ToolCall:
    """One tool call of a response; `arguments` is JSON object text, as OpenAI sends it."""

    id: str
    name: str
    arguments: str

    def to_openai(self) -> dict:
        """The call as an element of an OpenAI message's `tool_calls`."""
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


@dataclass(frozen=True)
class ParsedOutput:
    """A complete output split: `content` is the text outside the calls, in order, or None when
    that is empty or whitespace only; `tool_calls` in the order they appear."""

    content: str | None
    tool_calls: tuple[ToolCall, ...]


class ToolParser(ABC):
    """One instance parses one output: either `parse` (any number of times), or one stream of
    `feed` calls closed by one `finish`.

    Streaming contract: the `content` fragments concatenate to `parse(full).content` (or "" when
    that is None); each call opens with one fragment carrying its index, id, type, name and
    `arguments: ""`, and its `arguments` fragments concatenate to the parsed call's arguments.
    Text that could still turn out to be part of a call is held back, never sent as content;
    leading whitespace-only content is held until non-whitespace content follows (and dropped if
    none does). Ids come from `make_id`, called once per call in order of appearance, by
    `parse` and by streaming alike. Subclass constructors take only `make_id`.
    """

    def __init__(self, make_id: Callable[[], str] = new_call_id) -> None:
        self._make_id = make_id
        self._pending = ""  # text fed but not yet decided by _scan
        self._quiet = ""  # whitespace-only content held until something else is said
        self._spoke = False  # whether any content fragment has been sent
        self._num_calls = 0

    @abstractmethod
    def _scan(self, text: str, final: bool) -> tuple[list[str | FunctionCall], int]:
        """Decide a prefix of `text` (the undecided rest of the output so far: it starts where
        the previous `_scan` on this instance stopped) and return its pieces in order and its
        length. With `final` the text runs to the end of the output and all of it is decided."""

    def parse(self, text: str) -> ParsedOutput:
        """Split a complete output; never raises (malformed call text is content). Uses a fresh
        instance for the scan, so it does not disturb a stream in progress on this one."""
        pieces, _ = self._fresh()._scan(text, final=True)
        content = "".join(p for p in pieces if isinstance(p, str))
        calls = tuple(
            ToolCall(self._make_id(), p.name, p.arguments)
            for p in pieces
            if isinstance(p, FunctionCall)
        )
        return ParsedOutput(content if content.strip() else None, calls)

    def _fresh(self) -> ToolParser:
        """A new parser like this one (same ids), at the start of an output."""
        return type(self)(self._make_id)

    def feed(self, delta: str) -> list[Fragment]:
        """Take the next text of the output; return the fragments now decided (maybe none)."""
        self._pending += delta
        pieces, used = self._scan(self._pending, final=False)
        self._pending = self._pending[used:]
        return self._fragments(pieces)

    def finish(self) -> list[Fragment]:
        """End the stream: return the fragments for everything still held back."""
        pieces, _ = self._scan(self._pending, final=True)
        self._pending = ""
        return self._fragments(pieces)

    def _fragments(self, pieces: list[str | FunctionCall]) -> list[Fragment]:
        out: list[Fragment] = []
        text = ""  # adjacent text pieces go out as one fragment
        for piece in pieces:
            if isinstance(piece, str):
                text += piece
                continue
            out += self._content_fragments(text)
            text = ""
            index = self._num_calls
            self._num_calls += 1
            out.append(call_opening(index, self._make_id(), piece.name))
            out.append(call_arguments(index, piece.arguments))
        return out + self._content_fragments(text)

    def _content_fragments(self, text: str) -> list[Fragment]:
        if not self._spoke:
            self._quiet += text
            if not self._quiet.strip():
                return []
            text, self._quiet, self._spoke = self._quiet, "", True
        return [{"content": text}] if text else []


def call_opening(index: int, call_id: str, name: str) -> Fragment:
    """The first fragment of call `index`: its id, type and name, with no arguments yet."""
    return {
        "tool_calls": [
            {
                "index": index,
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": ""},
            }
        ]
    }


def call_arguments(index: int, arguments: str) -> Fragment:
    """A fragment carrying more of call `index`'s arguments text."""
    return {"tool_calls": [{"index": index, "function": {"arguments": arguments}}]}
