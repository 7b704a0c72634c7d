"""Step `kernels`: the kernel tests compiled for real on CUDA (never the Triton interpreter).

tests/kernels pick CUDA tensors and compiled kernels whenever CUDA is available and
TRITON_INTERPRET is unset, which this step ensures; without CUDA it FAILs rather than let the
tests fall back to the interpreter.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import xml.etree.ElementTree as ET

from bench.studies.gpu_check.step import Outcome, Step, require, require_path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tests", default="tests/kernels", help="test folder or file")


def resolve(args: argparse.Namespace) -> str:
    require("pytest", "triton", "torch")
    require_path(args.tests)
    return f"pytest and triton import, {args.tests} exists"


def run(args: argparse.Namespace) -> Outcome:
    import torch

    if not torch.cuda.is_available():
        return Outcome("FAIL", "no CUDA device: the kernels would run under the interpreter")
    junit = args.out / "junit.xml"
    args.out.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           f"--junitxml={junit}", args.tests], env=env, check=False)
    counts = junit_counts(junit) if junit.exists() else {}
    figures = ", ".join(f"{n} {key}" for key, n in counts.items()) or "no junit report"
    summary = f"{figures} (compiled, {torch.cuda.get_device_name()})"
    return Outcome("ok" if proc.returncode == 0 else "FAIL", summary,
                   {"returncode": proc.returncode, **counts})


def junit_counts(path) -> dict[str, int]:
    """passed / failed / errors / skipped over every testsuite of a junit XML file."""
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    total = {key: sum(int(s.get(key, 0)) for s in suites)
             for key in ("tests", "failures", "errors", "skipped")}
    return {"passed": total["tests"] - total["failures"] - total["errors"] - total["skipped"],
            "failed": total["failures"], "errors": total["errors"], "skipped": total["skipped"]}


STEP = Step(__doc__, add_arguments, resolve, run)

if __name__ == "__main__":
    raise SystemExit(STEP.main())
