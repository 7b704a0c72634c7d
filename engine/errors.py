"""Errors the engine raises for bad requests (ValueError or KeyError subclasses),
ProgramLimitError for a full engine, StepFailedError for a step that raised and
EngineBrokenError for an engine that can step no more, so a caller can map them to status
codes without parsing messages."""

from __future__ import annotations

from scheduler.executor_errors import EngineBrokenError
from scheduler.ids import DuplicateCallError
from scheduler.process_table import ProgramExistsError, ProgramLimitError, UnknownProgramError

__all__ = ["DuplicateCallError", "EngineBrokenError", "ProgramExistsError", "ProgramLimitError",
           "StepFailedError", "UnknownProgramError"]


class StepFailedError(RuntimeError):
    """A step raised after it was planned (in the executor, or applying its result); the
    original exception is `cause` (and `__cause__`), named in the message. The calls the
    step named and had not finished (`call_ids`) have finished with reason "error" and
    released all their blocks; those it had finished (a stop, a length limit) keep that
    finish. The final outputs of both come with the next step. Every other call is
    untouched, and the engine can go on stepping, unless `cause` is an EngineBrokenError."""

    def __init__(self, call_ids: list[str], cause: BaseException) -> None:
        super().__init__(call_ids, cause)
        self.call_ids = call_ids
        self.cause = cause

    def __str__(self) -> str:
        return (f"step failed ({type(self.cause).__name__}: {self.cause}); "
                f"{len(self.call_ids)} call(s) in it failed")

