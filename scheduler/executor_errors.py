"""The error of an engine whose executor can run no more steps (torch-free: the server and
the router map it to a status without importing the engine)."""

from __future__ import annotations


class EngineBrokenError(RuntimeError):
    """The engine's executor can run no more steps (a tensor-parallel worker died, or a step
    failed and left the ranks out of step): every later step raises it again, with the same
    message naming what broke. Terminal: the engine is to be closed and replaced. A step
    that meets it raises StepFailedError with it as the `cause`."""
