"""bench.support.vllm_server's pure parts: which server module an installed vLLM has (a fake
interpreter over a fake package) and the flags that match the offline run."""

from __future__ import annotations

import stat

import pytest

from bench.support.vllm_server import SERVER_MODULES, serve_args, server_module


def _vllm(tmp_path, modules):
    """A fake interpreter whose vllm lives in tmp_path/vllm, with files for `modules`."""
    for module in modules:
        path = tmp_path / (module.replace(".", "/") + ".py")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\necho {tmp_path}/vllm/__init__.py\n")
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    return str(python)


def test_the_newest_server_module_present_is_chosen(tmp_path):
    assert server_module(_vllm(tmp_path, SERVER_MODULES)) == SERVER_MODULES[0]


def test_an_older_vllm_gets_its_older_module(tmp_path):
    assert server_module(_vllm(tmp_path, SERVER_MODULES[1:])) == SERVER_MODULES[1]


def test_a_vllm_without_either_is_named(tmp_path):
    with pytest.raises(RuntimeError, match="which vLLM is it"):
        server_module(_vllm(tmp_path, ["vllm.other"]))


def test_the_server_runs_the_offline_engine_s_settings():
    args = serve_args(64, 2.5, enforce_eager=True, served_model_name="bench")
    assert args[args.index("--kv-cache-memory-bytes") + 1] == str(int(2.5 * (1 << 30)))
    assert args[args.index("--max-num-seqs") + 1] == "64"
    assert args[args.index("--dtype") + 1] == "float32"
    assert "--no-enable-prefix-caching" in args and "--enforce-eager" in args
    assert "--enforce-eager" not in serve_args(64, 2.5, False, "bench")
