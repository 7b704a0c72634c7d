"""A grammar matcher that panics, as llguidance's Rust code may: pyo3 raises a Rust panic as
PanicException, a BaseException (not an Exception). Shared by the engine's and the doors'
structured-output tests."""

from __future__ import annotations

from typing import Any, Callable

import pytest

from engine.structured.compiler import GrammarCompiler
from engine.structured.spec import StructuredOutput
from engine.structured.state import GrammarState


class MatcherPanic(BaseException):
    """Stands for pyo3's PanicException."""


class PanickingMatcher:
    """An llguidance matcher that raises `error` (MatcherPanic) at its `at`-th call of
    `method` (`consume_token`: on the engine thread; `unsafe_compute_mask_ptr`: on the mask
    worker); everything else goes to the real `matcher`."""

    def __init__(self, matcher: Any, method: str, at: int,
                 error: type[BaseException] = MatcherPanic) -> None:
        self._matcher, self._method, self._at, self._calls = matcher, method, at, 0
        self._error = error

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._matcher, name)
        if name != self._method:
            return attribute

        def counted(*args: Any) -> Any:
            self._calls += 1
            if self._calls == self._at:
                raise self._error(f"{name} failed")
            return attribute(*args)

        return counted


def panic_in_grammars(monkeypatch: pytest.MonkeyPatch, which: Callable[[StructuredOutput], bool],
                      method: str, at: int) -> None:
    """Until `monkeypatch` is undone, every call whose output grammar `which` accepts gets a
    matcher of its own that panics at its `at`-th `method` (every compiler's states)."""
    state = GrammarCompiler.state

    def panicking_state(compiler: GrammarCompiler, spec: StructuredOutput) -> GrammarState:
        fresh = state(compiler, spec)
        return GrammarState(PanickingMatcher(fresh.matcher, method, at)) if which(spec) \
            else fresh

    monkeypatch.setattr(GrammarCompiler, "state", panicking_state)
