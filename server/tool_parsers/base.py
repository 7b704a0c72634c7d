"""The tool-call parser interface: a complete output to (content, calls), or a stream of text
deltas to OpenAI chat-completion-chunk delta fragments, the two always agreeing.

A parser's only format-specific part is `_scan`: it decides a prefix of the text it is given
as pieces (plain text, a `FunctionCall` it found, or a `PartialCall` still being written) and
leaves the undecided rest for more text. Both `parse` and the streaming methods run on
`_scan`, so a stream split anywhere yields the same content and calls as `parse` on the whole,
provided `_scan` decides each prefix as it would in the whole text (holding back whatever
later text could change). A call opens as soon as its name is known and its arguments then
stream as the model writes them (canonical JSON, `canonical_json`); once open it stays a
call, whatever follows. Text that turns out to be no call before its name is known is a
plain-text piece. Nothing raises.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar
from uuid import uuid4

from server.held_back_scan import HeldBackScanner

Fragment = dict  # one chat-completion-chunk `delta`, e.g. {"content": "..."}


def new_call_id() -> str:
    """A fresh OpenAI-style call id: "call_" and 24 random hex digits."""
    return "call_" + uuid4().hex[:24]


@dataclass(frozen=True)
class FunctionCall:
    """A whole call as a parser finds it, before it gets an id: `arguments` is its arguments
    text (JSON object text, unless the model wrote invalid JSON or was cut)."""

    name: str
    arguments: str


@dataclass(frozen=True)
class PartialCall:
    """A call still being written: its name is known, `arguments` is its arguments text so
    far. The first call piece of the next `_scan` (partial or whole) is the same call, its
    arguments extending these."""

    name: str
    arguments: str


Piece = str | FunctionCall | PartialCall  # what `_scan` decides: content, or a call


@dataclass(frozen=True)
class ToolCall:
    """One tool call of a response; `arguments` is text, as OpenAI sends it (JSON object
    text, unless the model wrote invalid JSON or was cut)."""

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


class ToolParser(HeldBackScanner[Piece]):
    """One instance parses one output: either `parse` (any number of times), or one stream of
    `feed` calls closed by one `finish`.

    Streaming contract: the `content` fragments concatenate to `parse(full).content` (or "" when
    that is None); each call opens with one fragment carrying its index, id, type, name and
    `arguments: ""` as soon as its name is known, and its `arguments` fragments (sent as the
    arguments are written) concatenate to the parsed call's arguments.
    Text that could still turn out to be part of a call is held back, never sent as content;
    leading whitespace-only content is held until non-whitespace content follows (and dropped if
    none does). Ids come from `make_id`, called once per call in order of appearance, by
    `parse` and by streaming alike. Subclass constructors take only `make_id`.

    `call_marker` is the text that opens a call in the format (None: a format whose calls
    have no such marker); a reasoning parser may end an unclosed reasoning there.
    """

    call_marker: ClassVar[str | None] = None

    def __init__(self, make_id: Callable[[], str] = new_call_id) -> None:
        super().__init__()
        self._make_id = make_id
        self._quiet = ""  # whitespace-only content held until something else is said
        self._spoke = False  # whether any content fragment has been sent
        self._num_calls = 0
        self._open: int | None = None  # the index of the call being streamed, if any
        self._sent = 0  # the length of its arguments sent so far

    @abstractmethod
    def _scan(self, text: str, final: bool) -> tuple[list[Piece], int]:
        """Decide a prefix of `text` (the undecided rest of the output so far: it starts where
        the previous `_scan` on this instance stopped) and return its pieces in order and its
        length. A `PartialCall` can only be the last piece; with `final` the text runs to the
        end of the output and all of it is decided (no `PartialCall`)."""

    def parse(self, text: str) -> ParsedOutput:
        """Split a complete output; never raises. Uses a fresh instance for the scan, so it
        does not disturb a stream in progress on this one."""
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

    def _fragments(self, pieces: list[Piece]) -> list[Fragment]:
        out: list[Fragment] = []
        text = ""  # adjacent text pieces go out as one fragment
        for piece in pieces:
            if isinstance(piece, str):
                text += piece
                continue
            out += self._content_fragments(text)
            text = ""
            out += self._call_fragments(piece)
        return out + self._content_fragments(text)

    def _call_fragments(self, piece: FunctionCall | PartialCall) -> list[Fragment]:
        """The opening of a new call, and the arguments not sent yet."""
        out: list[Fragment] = []
        if self._open is None:
            self._open, self._sent = self._num_calls, 0
            self._num_calls += 1
            out.append(call_opening(self._open, self._make_id(), piece.name))
        if len(piece.arguments) > self._sent:
            out.append(call_arguments(self._open, piece.arguments[self._sent:]))
            self._sent = len(piece.arguments)
        if isinstance(piece, FunctionCall):
            self._open = None
        return out

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
