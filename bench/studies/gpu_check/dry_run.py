"""The dry run of a list of steps, in one process:
`python -m bench.studies.gpu_check.dry_run < STEPS`.

A step line is `NAME TIMEOUT_S MODULE [ARGS...]`, split on whitespace (no quoting); blank lines
and lines starting with `#` are skipped. For each step: the timeout is a positive integer, the
module imports and defines `STEP`, its arguments parse, and `STEP.resolve` succeeds. Prints
`ok NAME: NOTE` or `FAIL NAME: WHY` per step; exits 1 if any step failed.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import sys
from typing import Iterable, Iterator

from bench.studies.gpu_check.step import Step


def parse_line(line: str) -> tuple[str, int, str, list[str]] | None:
    """(name, timeout, module, args) of a step line; None for blank and comment lines.
    Raises ValueError for a malformed line."""
    words = line.split()
    if not words or words[0].startswith("#"):
        return None
    if len(words) < 3:
        raise ValueError(f"expected 'NAME TIMEOUT_S MODULE [ARGS...]', got {line.strip()!r}")
    name, limit, module, *args = words
    if not limit.isdigit() or int(limit) <= 0:
        raise ValueError(f"timeout must be a positive integer of seconds, got {limit!r}")
    return name, int(limit), module, args


def check_step(module: str, args: list[str]) -> str:
    """The step's dry-run note; raises with the reason when it cannot run."""
    step = getattr(importlib.import_module(module), "STEP", None)
    if not isinstance(step, Step):
        raise TypeError(f"{module} defines no STEP")
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            parsed = step.parser(prog=module).parse_args([*args, "--dry-run"])
    except SystemExit as exc:
        lines = stderr.getvalue().strip().splitlines() or [f"exit {exc.code}"]
        raise ValueError(f"bad arguments: {lines[-1]}") from None
    return step.resolve(parsed)


def check_steps(lines: Iterable[str]) -> Iterator[str]:
    """One `ok NAME: NOTE` / `FAIL NAME: WHY` line per step line, as each is checked."""
    for number, line in enumerate(lines, 1):
        try:
            parsed = parse_line(line)
        except ValueError as exc:
            yield f"FAIL line {number}: {exc}"
            continue
        if parsed is None:
            continue
        name, _, module, args = parsed
        try:
            yield f"ok {name}: {check_step(module, args)}"
        except Exception as exc:  # noqa: BLE001 - every failure is reported, none stops the rest
            yield f"FAIL {name}: {type(exc).__name__}: {exc}"


def main() -> int:
    failed = False
    for result in check_steps(sys.stdin):
        print(result, flush=True)
        failed |= result.startswith("FAIL")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
