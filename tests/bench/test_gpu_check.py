"""bench/studies/gpu_check.sh on a CPU machine: its dry run resolves every step, a broken step is
reported by name with its reason, and a real run records FAIL, n/a and TIMEOUT per step."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from bench.studies.gpu_check.dry_run import check_steps

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "studies" / "gpu_check.sh"
STEPS = ["setup", "env", "kernels", "parity-tiny", "parity-smollm2", "decode-bandwidth", "swap",
         "throughput", "tensor-parallel"]


def run_script(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHON": sys.executable, **env})


def test_dry_run_resolves_every_step():
    proc = run_script("--dry-run")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert [line.split()[0] for line in lines] == ["ok"] * len(STEPS)
    assert [line.split()[1].rstrip(":") for line in lines] == STEPS


def test_the_guides_path_runs_the_same_check():
    # bench/gpu_check.sh (the path the device guide names) passes its arguments through.
    steps = "env 10 bench.studies.gpu_check.environment"
    direct = run_script("--dry-run", GPU_CHECK_STEPS=steps)
    wrapped = subprocess.run(
        ["bash", str(ROOT / "bench" / "gpu_check.sh"), "--dry-run"], capture_output=True,
        text=True, timeout=120, cwd="/",
        env={**os.environ, "PYTHON": sys.executable, "GPU_CHECK_STEPS": steps})
    assert wrapped.returncode == direct.returncode == 0, wrapped.stdout + wrapped.stderr
    assert wrapped.stdout == direct.stdout and "\nok env: " in wrapped.stdout


def test_broken_steps_fail_by_name_with_the_reason():
    results = list(check_steps([
        "env 10 bench.studies.gpu_check.environment",
        "kernels 10 bench.studies.gpu_check.kernel_tests --tests tests/no-such-dir",
        "ghost 10 bench.studies.gpu_check.no_such_step",
        "swap 10 bench.studies.gpu_check.swap --blocks 0",
        "# a comment",
        "late forever bench.studies.gpu_check.swap",
        "alone",
    ]))
    assert results[0].startswith("ok env: ")
    assert results[1] == "FAIL kernels: Unresolved: missing path tests/no-such-dir"
    assert results[2] == ("FAIL ghost: ModuleNotFoundError: No module named "
                          "'bench.studies.gpu_check.no_such_step'")
    assert results[3] == ("FAIL swap: ValueError: bad arguments: bench.studies.gpu_check.swap: "
                          "error: argument --blocks: expected positive integers N[,N...], got '0'")
    assert results[4] == ("FAIL line 6: timeout must be a positive integer of seconds, got "
                          "'forever'")
    assert results[5].startswith("FAIL line 7: expected 'NAME TIMEOUT_S MODULE [ARGS...]'")
    assert len(results) == 6


def test_dry_run_exits_nonzero_on_a_step_injected_through_the_environment():
    proc = run_script("--dry-run", GPU_CHECK_STEPS="ghost 10 bench.studies.gpu_check.no_such_step")
    assert proc.returncode == 1
    assert proc.stdout.splitlines()[-1].startswith("FAIL ghost: ModuleNotFoundError")


def test_without_an_output_folder_it_fails_clearly():
    proc = run_script(OUT="")
    assert proc.returncode == 2
    assert "no output folder: pass one as the first argument or set $OUT" in proc.stderr


def test_a_real_run_tables_each_step_and_goes_on_after_failures(tmp_path):
    steps = "\n".join(["env 60 bench.studies.gpu_check.environment",  # FAIL: no CUDA here
                       "tp 60 bench.studies.gpu_check.tensor_parallel",  # n/a: fewer than 2 GPUs
                       "slow 1 bench.studies.gpu_check.kernel_tests"])  # killed while importing
    proc = run_script(str(tmp_path), GPU_CHECK_STEPS=steps)
    assert proc.returncode == 1
    table = (tmp_path / "gpu_check.md").read_text()
    rows = {line.split("|")[1].strip(): line.split("|")[2].strip()
            for line in table.splitlines() if line.startswith("| ") and "---" not in line}
    assert rows == {"step": "status", "env": "FAIL", "tp": "n/a", "slow": "TIMEOUT"}
    assert "no CUDA device" in table and "Log tail" in table
    assert (tmp_path / "env" / "result.json").exists()
    assert (tmp_path / "tp" / "summary").read_text().splitlines()[0] == "n/a"
