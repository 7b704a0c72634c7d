"""`python -m bench.report [--check]`: write bench/REPORT.md from the records in
bench/results/report/; with `--check`, write nothing and exit 1 when bench/REPORT.md differs
from what the records give (it is stale, or was edited by hand)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench.report.records import load_studies
from bench.report.render import render_report

ROOT = Path(__file__).resolve().parents[2]
REPORT = ROOT / "bench" / "REPORT.md"
RECORDS = ROOT / "bench" / "results" / "report"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 if bench/REPORT.md is not what the records give")
    args = parser.parse_args(argv)
    text = render_report(load_studies(RECORDS))
    if not args.check:
        REPORT.write_text(text)
        print(f"wrote {REPORT.relative_to(ROOT)}")
        return 0
    if not REPORT.exists() or REPORT.read_text() != text:
        print(f"{REPORT.relative_to(ROOT)} is stale: run `python -m bench.report`",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
