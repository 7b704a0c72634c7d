"""One GPU-check step: its command line, its dry run and the files its real run leaves.

A real run (`--out DIR`) writes into DIR: `summary` (two lines: the status `ok`, `n/a` or
`FAIL`, then one line for the table), `result.json` (the raw figures) and `report.md` (a
markdown section, possibly empty); it exits 1 on FAIL, else 0. Its log is whatever it prints.
A dry run (`--dry-run`) imports and checks everything the real run needs, on any machine and
without a GPU, prints one note and exits 0, or raises `Unresolved` saying what is missing.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

STATUSES = ("ok", "n/a", "FAIL")


class Unresolved(Exception):
    """A step cannot run on the target machine; the message names what is missing."""


@dataclass(frozen=True)
class Outcome:
    """What a real run found: `status` in STATUSES, a one-line `summary` for the table."""

    status: str
    summary: str
    data: dict[str, Any] = field(default_factory=dict)
    report: str = ""

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")


@dataclass(frozen=True)
class Step:
    """`add_arguments(parser)` adds the step's own options; `resolve(args)` is the dry run
    (returns a note, raises Unresolved); `run(args)` is the real run."""

    description: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    resolve: Callable[[argparse.Namespace], str]
    run: Callable[[argparse.Namespace], Outcome]

    def parser(self, prog: str | None = None) -> argparse.ArgumentParser:
        parser = argparse.ArgumentParser(prog=prog, description=self.description,
                                         formatter_class=argparse.RawDescriptionHelpFormatter)
        parser.add_argument("--dry-run", action="store_true",
                            help="check that the step can run here, then exit")
        parser.add_argument("--out", type=Path, help="folder for summary, result.json, report.md")
        self.add_arguments(parser)
        return parser

    def main(self, argv: Sequence[str] | None = None) -> int:
        parser = self.parser()
        args = parser.parse_args(argv)
        if args.dry_run:
            try:
                print(self.resolve(args))
            except Unresolved as exc:
                print(f"FAIL: {exc}", file=sys.stderr)
                return 1
            return 0
        if args.out is None:
            parser.error("--out DIR is required without --dry-run")
        outcome = self.run(args)
        write_outcome(args.out, outcome)
        print(f"{outcome.status}: {outcome.summary}")
        return 1 if outcome.status == "FAIL" else 0


def write_outcome(out: Path, outcome: Outcome) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary").write_text(f"{outcome.status}\n{' '.join(outcome.summary.split())}\n")
    (out / "result.json").write_text(json.dumps(outcome.data, indent=2, default=str) + "\n")
    (out / "report.md").write_text(outcome.report)


def require(*targets: str) -> None:
    """Import each target, `module` or `module:attr.attr`; raise Unresolved naming the first
    that does not import or lacks the attribute."""
    for target in targets:
        module_name, _, attrs = target.partition(":")
        try:
            obj = importlib.import_module(module_name)
            for attr in filter(None, attrs.split(".")):
                obj = getattr(obj, attr)
        except (ImportError, AttributeError) as exc:
            raise Unresolved(f"{target}: {type(exc).__name__}: {exc}") from exc


def require_path(path: str | Path) -> Path:
    """`path` (relative to the working directory, the repository root) if it exists."""
    if not Path(path).exists():
        raise Unresolved(f"missing path {path}")
    return Path(path)


def int_list(text: str) -> list[int]:
    """'64,256' -> [64, 256], positive integers only (an argparse type)."""
    try:
        values = [int(n) for n in text.split(",")]
    except ValueError:
        values = []
    if not values or min(values) <= 0:
        raise argparse.ArgumentTypeError(f"expected positive integers N[,N...], got {text!r}")
    return values


def add_device_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", default="cuda", help="torch device (cpu only for smoke tests)")


def release_device_memory() -> None:
    """Free what the last engine or model held, before the next one loads."""
    import gc

    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A markdown table of `rows` (cells already formatted) under `header`, newline-ended."""
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"
