"""Every command quoted in bench/RESULTS.md, the notes under bench/notes/, bench/REPORT.md and
README.md resolves to a real entry point and parses with its real argument parser, as a dry
run (nothing runs past parsing): a renamed flag or module fails here.
bench/RESULTS_ARCHIVE.md is left out on purpose: its stale sections keep their commands as
they were run, and those may name flags since removed.

A command is a fenced-block line, or an inline code span with a flag (a bare
`agentix bench capacity` in prose is a name, not a command), starting with `agentix `,
`python -m ` or `.venv/bin/python -m `. Before parsing: shell comments and line
continuations go, optional `[...]` groups are dropped, `a|b` alternatives take the first.
The usual placeholders take a value (PLACEHOLDERS; a trailing `...` goes); a command with
another placeholder (a word in capitals) or shell syntax cannot be parsed as written and is
left out; `test_commands_are_found` keeps their share
small."""

from __future__ import annotations

import argparse
import importlib
import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = (ROOT / "bench" / "RESULTS.md", *sorted((ROOT / "bench" / "notes").glob("*.md")),
        ROOT / "bench" / "REPORT.md", ROOT / "README.md")
START = re.compile(r"^(?:\.venv/bin/python -m |python -m |agentix )")
PLACEHOLDERS = {"POLICY": "atlas", "P": "atlas", "W": "mixed", "DIR": "/tmp",
                "HOST:PORT": "127.0.0.1:1", "TOKEN": "token", "OUT": "/tmp/out", "S": "1",
                "N": "1", "R": "1"}
PLACEHOLDER = re.compile(r"(?<![\w-])[A-Z][A-Z_0-9]*(?![\w-])")
SHELL = re.compile(r"[<>$;&()]|\|\s|\.\.\.|\bfor\b|\bdo\b")


def _spans(text: str) -> list[str]:
    """Fenced-block lines (continuations joined, comments cut) and inline code spans with
    a flag."""
    spans, fenced = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            code = line.split(" #", 1)[0].rstrip()
            if spans and spans[-1].endswith("\\"):
                spans[-1] = spans[-1][:-1].rstrip() + " " + code.strip()
            else:
                spans.append(code)
    prose = re.sub(r"^```.*?^```", "", text, flags=re.DOTALL | re.MULTILINE)
    inline = [" ".join(span.split()) for span in re.findall(r"`([^`]+)`", prose,
                                                            flags=re.DOTALL)]
    return spans + [span for span in inline if " --" in span]


def commands() -> list[str]:
    found = []
    for doc in DOCS:
        for span in _spans(doc.read_text()):
            span = span.strip().removesuffix("...").strip()
            for placeholder, value in PLACEHOLDERS.items():
                span = re.sub(rf"(?<![\w-]){re.escape(placeholder)}(?![\w-])", value, span)
            if START.match(span):
                found.append(span)
    return sorted(set(found))


def parsable(command: str) -> bool:
    return not PLACEHOLDER.search(command) and not SHELL.search(command)


def argv_of(command: str) -> tuple[str, list[str]]:
    """(module whose `main(argv)` parses it, argv)."""
    command = re.sub(r"\s*\[[^\]]*\]", "", command)
    words = [w.split("|")[0] if "|" in w and not w.startswith("-") else w
             for w in shlex.split(command)]
    if words[0] == "agentix":
        if len(words) > 1 and words[1] == "bench":
            return "bench.cli", words[2:]
        return "server.cli", words[1:]
    module = words[words.index("-m") + 1]
    return module, words[words.index("-m") + 2:]


class _Parsed(Exception):
    """Raised once the outermost parse of a dry run has succeeded."""


def dry_run(module_name: str, argv: list[str], monkeypatch
            ) -> tuple[argparse.Namespace, list[str]]:
    """Parse `argv` with `module_name`'s own `main`, stopping right after parsing; returns
    the namespace and the words no argument took."""
    original = argparse.ArgumentParser.parse_known_args
    depth = [0]

    def parse_known_args(self, args=None, namespace=None):
        depth[0] += 1
        try:
            result = original(self, args, namespace)
        finally:
            depth[0] -= 1
        if depth[0] == 0:
            raise _Parsed(*result)
        return result

    monkeypatch.setattr(argparse.ArgumentParser, "parse_known_args", parse_known_args)
    module = importlib.import_module(module_name)
    if not hasattr(module, "main"):
        module = importlib.import_module(f"{module_name}.__main__")
    with pytest.raises(_Parsed) as parsed:
        module.main(argv)
    return parsed.value.args


COMMANDS = [c for c in commands() if parsable(c)]


def test_commands_are_found():
    everything = commands()
    assert len(everything) >= 40
    assert len(COMMANDS) >= 0.6 * len(everything), [c for c in everything if not parsable(c)]


@pytest.mark.parametrize("command", COMMANDS)
def test_a_quoted_command_parses(command, monkeypatch):
    module, argv = argv_of(command)
    try:
        _, extras = dry_run(module, argv, monkeypatch)
    except SystemExit as exc:  # argparse's error (it printed why)
        pytest.fail(f"{command!r}: exits {exc.code} while parsing")
    assert not extras, f"{command!r}: no argument takes {extras}"
