"""No tensor-parallel worker is left behind: after a normal close, after an exception in a
step, and after SIGTERM of the engine's process (which runs no
clean-up: the worker's parent-death signal and watch end it). A failed step or a dead worker
breaks the engine for good (EngineBrokenError, at once from then on). Bad splits fail before
any worker starts."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from processes import alive, wait_gone
from engine import LLM, SamplingParams
from engine.errors import EngineBrokenError, StepFailedError

ROOT = Path(__file__).resolve().parents[2]


def test_close_stops_the_workers(tiny_llama_dir):
    llm = LLM(tiny_llama_dir, tensor_parallel_size=2, num_kv_blocks=32)
    pids = llm.engine.executor.worker_pids
    assert len(pids) == 1 and alive(pids[0])
    assert len(llm.generate([5, 6, 7], SamplingParams(max_tokens=3))[0].token_ids) == 3
    llm.close()
    assert wait_gone(pids, 0.0) == []   # close waits for them
    llm.close()                        # idempotent


def test_an_exception_in_a_step_stops_the_workers(tiny_llama_dir, monkeypatch):
    llm = LLM(tiny_llama_dir, tensor_parallel_size=2, num_kv_blocks=32)
    pids = llm.engine.executor.worker_pids
    runner = llm.engine.executor.runner

    def broken(step, plan):
        raise RuntimeError("injected failure in rank 0's step")

    monkeypatch.setattr(runner, "run", broken)
    with pytest.raises(StepFailedError, match="injected failure") as first:
        llm.generate([5, 6, 7], SamplingParams(max_tokens=3))
    assert wait_gone(pids, 2.0) == []
    with pytest.raises(StepFailedError) as failed:
        llm.generate([8, 9], SamplingParams(max_tokens=2))
    assert isinstance(failed.value.cause, EngineBrokenError)
    assert str(failed.value.cause) == str(first.value.cause) == (
        "tensor-parallel step failed (RuntimeError: injected failure in rank 0's step)")
    llm.close()


def test_a_killed_worker_breaks_the_engine_for_good(tiny_llama_dir):
    """SIGKILL of rank 1 while idle: the next step fails naming it, and so does every later
    one, at once (no collective is tried again)."""
    llm = LLM(tiny_llama_dir, tensor_parallel_size=2, num_kv_blocks=32)
    [pid] = llm.engine.executor.worker_pids
    try:
        os.kill(pid, signal.SIGKILL)
        assert wait_gone([pid], 5.0) == []
        broken = f"tensor-parallel worker rank 1 (pid {pid}) exited with status -9"
        for _ in range(2):
            started = time.monotonic()
            with pytest.raises(StepFailedError) as failed:
                llm.generate([5, 6, 7], SamplingParams(max_tokens=3))
            assert (type(failed.value.cause), str(failed.value.cause)) == (
                EngineBrokenError, broken)
            assert time.monotonic() - started < 1.0
        llm.engine.check_integrity()
    finally:
        llm.close()


SCRIPT = """
import sys, time
sys.path.insert(0, {root!r})
from engine import LLM
llm = LLM({model!r}, tensor_parallel_size=2, num_kv_blocks=32)
print(*llm.engine.executor.worker_pids, flush=True)
time.sleep(600)
"""


def test_the_workers_die_with_their_sigtermed_parent(tiny_llama_dir):
    script = textwrap.dedent(SCRIPT.format(root=str(ROOT), model=tiny_llama_dir))
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                              text=True)
    try:
        pids = [int(p) for p in parent.stdout.readline().split()]
        assert len(pids) == 1 and alive(pids[0])
        os.kill(parent.pid, signal.SIGTERM)   # its default action: no atexit, no close
        parent.wait(10)
        assert wait_gone(pids) == []
    finally:
        parent.kill()
        parent.wait()


def test_a_bad_split_fails_before_any_worker_starts(tiny_llama_dir):
    before = set(os.listdir("/proc"))
    with pytest.raises(ValueError, match="tensor_parallel_size 3 does not divide the "
                                         "model's num_attention_heads 4"):
        LLM(tiny_llama_dir, tensor_parallel_size=3, num_kv_blocks=32)
    children = [p for p in set(os.listdir("/proc")) - before if p.isdigit()
                and alive(int(p)) and Path(f"/proc/{p}/stat").read_text().split()[3]
                == str(os.getpid())]
    assert children == []
