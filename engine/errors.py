"""Errors the engine raises for bad requests (all ValueError or KeyError subclasses, so a
caller can map them to status codes without parsing messages)."""

from __future__ import annotations

from scheduler.process_table import ProgramExistsError, UnknownProgramError

__all__ = ["DuplicateCallError", "ProgramExistsError", "UnknownProgramError"]


class DuplicateCallError(ValueError):
    """A call id that is already in use (live, or finished and not yet popped)."""
