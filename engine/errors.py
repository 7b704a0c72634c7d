"""Errors the engine raises for bad requests (ValueError or KeyError subclasses),
ProgramLimitError for a full engine, StepFailedError for a step that raised and
EngineBrokenError for an engine that can step no more, so a caller can map them to status
codes without parsing messages."""

from __future__ import annotations

from scheduler.ids import short
from scheduler.process_table import ProgramExistsError, ProgramLimitError, UnknownProgramError

__all__ = ["DuplicateCallError", "EngineBrokenError", "ProgramExistsError", "ProgramLimitError",
           "StepFailedError", "UnknownProgramError"]


class DuplicateCallError(ValueError):
    """A call id (`args[0]`) that is already in use (live, or finished and not yet popped)."""

    def __str__(self) -> str:
        return f"call_id {short(self.args[0])} is already in use"


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


class EngineBrokenError(RuntimeError):
    """The engine's executor can run no more steps (a tensor-parallel worker died, or a step
    failed and left the ranks out of step): every later step raises it again, with the same
    message naming what broke. Terminal: the engine is to be closed and replaced. A step
    that meets it raises StepFailedError with it as the `cause`."""
