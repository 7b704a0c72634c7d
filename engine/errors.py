"""Errors the engine raises for bad requests (ValueError or KeyError subclasses), and
ProgramLimitError for a full engine, so a caller can map them to status codes without
parsing messages."""

from __future__ import annotations

from scheduler.ids import short
from scheduler.process_table import ProgramExistsError, ProgramLimitError, UnknownProgramError

__all__ = ["DuplicateCallError", "ProgramExistsError", "ProgramLimitError", "UnknownProgramError"]


class DuplicateCallError(ValueError):
    """A call id (`args[0]`) that is already in use (live, or finished and not yet popped)."""

    def __str__(self) -> str:
        return f"call_id {short(self.args[0])} is already in use"
