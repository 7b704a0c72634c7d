"""Errors the engine raises for bad requests (ValueError or KeyError subclasses),
ProgramLimitError for a full engine, and StepFailedError for a step that raised, so a
caller can map them to status codes without parsing messages."""

from __future__ import annotations

from scheduler.ids import DuplicateCallError
from scheduler.process_table import ProgramExistsError, ProgramLimitError, UnknownProgramError

__all__ = ["DuplicateCallError", "ProgramExistsError", "ProgramLimitError", "StepFailedError",
           "UnknownProgramError"]


class StepFailedError(RuntimeError):
    """A step raised after it was planned (in the executor, or applying its result); the
    original exception is `cause` (and `__cause__`), named in the message. The calls the step named (`call_ids`) have finished
    with reason "error" and released all their blocks; every other call is untouched, and
    the engine can go on stepping."""

    def __init__(self, call_ids: list[str], cause: BaseException) -> None:
        super().__init__(call_ids, cause)
        self.call_ids = call_ids
        self.cause = cause

    def __str__(self) -> str:
        return (f"step failed ({type(self.cause).__name__}: {self.cause}); "
                f"{len(self.call_ids)} call(s) in it failed")
