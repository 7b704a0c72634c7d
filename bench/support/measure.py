"""One measurement per fresh process, so that each engine's peak resident memory is its own.

`run_in_subprocess("bench.support.hf_baseline:run_hf_generate", {...})` starts
`python -m bench.support.measure` with the call written to a JSON file, calls the function there,
adds `peak_rss_mb` (the child's `getrusage(RUSAGE_SELF).ru_maxrss`, i.e. interpreter + imports +
model + the run), `peak_tree_rss_mb` and `peak_tree_pss_mb` (the child with its descendants,
sampled from here: `bench.support.tree_memory`) and returns the function's dict. Arguments and
results must be JSON-serializable. `python` runs the child under another interpreter (a venv of its own, such as
vLLM's), which needs only the standard library to run this module.
"""

from __future__ import annotations

import importlib
import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Mapping

_REPO_ROOT = Path(__file__).resolve().parents[2]


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far, in MiB."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024  # bytes on macOS, KiB on Linux


def run_in_subprocess(fn_path: str, kwargs: dict[str, Any], timeout: float | None = None,
                      python: str = sys.executable, env: Mapping[str, str] | None = None
                      ) -> dict[str, Any]:
    """Call `fn_path` ("package.module:function", returning a dict) with `kwargs` in a fresh
    `python` interpreter; return its dict plus `peak_rss_mb` of that interpreter and
    `peak_tree_rss_mb` and `peak_tree_pss_mb` of it with its descendants. The child inherits
    stdout/stderr and the environment, with `env` on top, HF_HUB_OFFLINE=1 and the
    repository on PYTHONPATH.
    Raises ValueError for a malformed `fn_path`, RuntimeError when the child fails.
    """
    from bench.support.tree_memory import PeakTreeMemory  # psutil: not needed by the child

    module, sep, name = fn_path.partition(":")
    if not (module and sep and name):
        raise ValueError(f"fn_path: expected 'package.module:function', got {fn_path!r}")
    with tempfile.TemporaryDirectory(prefix="agentix-measure-") as tmp:
        spec_file, result_file = Path(tmp) / "spec.json", Path(tmp) / "result.json"
        spec_file.write_text(json.dumps({"fn": fn_path, "kwargs": kwargs}))
        path = os.pathsep.join(p for p in (str(_REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p)
        child_env = {**os.environ, **(env or {}), "HF_HUB_OFFLINE": "1", "PYTHONPATH": path}
        cmd = [python, "-m", "bench.support.measure", str(spec_file), str(result_file)]
        proc = subprocess.Popen(cmd, env=child_env, cwd=_REPO_ROOT)
        with PeakTreeMemory(proc.pid) as tree:
            try:
                returncode = proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                raise
        if returncode != 0 or not result_file.exists():
            raise RuntimeError(f"{fn_path} failed in its subprocess (exit code {returncode})")
        return {**json.loads(result_file.read_text()), **tree.figures()}


def _child(spec_file: str, result_file: str) -> None:
    spec = json.loads(Path(spec_file).read_text())
    module, _, name = spec["fn"].partition(":")
    result = dict(getattr(importlib.import_module(module), name)(**spec["kwargs"]))
    result["peak_rss_mb"] = peak_rss_mb()
    Path(result_file).write_text(json.dumps(result))


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit("usage: python -m bench.support.measure SPEC_JSON RESULT_JSON")
    _child(sys.argv[1], sys.argv[2])
