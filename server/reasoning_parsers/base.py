"""The reasoning parser interface: a complete output to (reasoning, content), or a stream of
text deltas to chat-completion-chunk delta fragments, the two always agreeing.

A parser's only format-specific part is `_scan`: it decides a prefix of the text it is given
as pieces (reasoning text or content text, markers removed) and leaves the undecided rest, the
text that could still begin a marker, for more text. Both `parse` and the streaming methods run
on `_scan`, so a stream split anywhere yields what `parse` gives on the whole, provided `_scan`
decides each prefix as it would in the whole text. Nothing raises, whatever the text.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import ClassVar, Literal

from server.held_back_scan import HeldBackScanner

REASONING = "reasoning_content"  # vLLM's field, in a message and in a streamed delta
CONTENT = "content"
Kind = Literal["reasoning_content", "content"]
Fragment = dict  # one chat-completion-chunk `delta`: {"reasoning_content": ...} or {"content": ...}


class ReasoningParser(HeldBackScanner[tuple[Kind, str]]):
    """One instance parses one output: either `parse` (any number of times), or one stream of
    `feed` calls closed by one `finish`.

    An output is one reasoning part followed by one content part. `parse` gives each as text,
    None when empty; reasoning that is whitespace only is None as well (an empty think block
    is no reasoning). Streaming contract: for any split of the output into deltas, the
    `reasoning_content` fragments concatenate to `parse`'s reasoning and the `content`
    fragments to its content ("" for None); every fragment has one key and non-empty text,
    and no reasoning fragment follows a content fragment. Text that could still begin a marker
    is held back until decided; whitespace-only reasoning is held until other reasoning text
    follows (and dropped if none does). The content fragments, like `parse`'s content, are
    exactly the text a tool parser should see: tool calls are parsed from the content only.

    `markers` are the texts the format needs as single tokens of the model's vocabulary
    (checked at startup: `server.reasoning_parsers.vocabulary`). A parser is made for one
    request's output: `in_content` when its prompt already closed the reasoning
    (`closes_reasoning`: the output is content from its start), `call_marker` the text that
    opens a call in the request's tool format (hermes's `<tool_call>`; None: no tool
    parsing), which may end an unclosed reasoning where the format says so. Subclass
    constructors take these two arguments only.
    """

    markers: ClassVar[tuple[str, ...]]

    def __init__(self, in_content: bool = False, call_marker: str | None = None) -> None:
        super().__init__()
        self.in_content = in_content
        self.call_marker = call_marker
        self._quiet = ""  # whitespace-only reasoning held until other reasoning follows
        self._reasoned = False  # whether a reasoning fragment has been sent

    @classmethod
    @abstractmethod
    def closes_reasoning(cls, prompt_tail: str) -> bool:
        """Whether a prompt whose text ends with `prompt_tail` has closed the reasoning
        already (a chat template with thinking turned off writes an empty reasoning into
        the prompt), so that the output is all content."""

    @abstractmethod
    def _scan(self, text: str, final: bool) -> tuple[list[tuple[Kind, str]], int]:
        """Decide a prefix of `text` (the undecided rest of the output so far: it starts where
        the previous `_scan` on this instance stopped) and return its pieces in order, each
        (REASONING or CONTENT, text, maybe empty), and its length. With `final` the text runs
        to the end of the output and all of it is decided."""

    def parse(self, text: str) -> tuple[str | None, str | None]:
        """(reasoning, content) of a complete output; never raises. Uses a fresh instance, so
        it does not disturb a stream in progress on this one."""
        fresh = type(self)(self.in_content, self.call_marker)
        fragments = fresh.feed(text) + fresh.finish()
        reasoning = "".join(f.get(REASONING, "") for f in fragments)
        content = "".join(f.get(CONTENT, "") for f in fragments)
        return reasoning or None, content or None

    def _fragments(self, pieces: list[tuple[Kind, str]]) -> list[Fragment]:
        out: list[Fragment] = []
        for kind, text in pieces:
            if kind == REASONING and not self._reasoned:
                self._quiet += text
                if not self._quiet.strip():
                    continue
                text, self._quiet, self._reasoned = self._quiet, "", True
            if not text:
                continue
            if out and kind in out[-1]:
                out[-1][kind] += text  # adjacent pieces of one kind go out as one fragment
            else:
                out.append({kind: text})
        return out
