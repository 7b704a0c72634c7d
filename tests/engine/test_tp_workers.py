"""No tensor-parallel worker is left behind: after a normal close, after an exception in a
step, and after SIGTERM of the engine's process (which runs no
clean-up: the worker's parent-death signal and watch end it). Bad splits fail before any
worker starts."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from processes import alive, wait_gone
from engine import LLM, SamplingParams
from engine.errors import StepFailedError
from engine.parallel.workers import WorkerError

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
    with pytest.raises(RuntimeError, match="injected failure"):
        llm.generate([5, 6, 7], SamplingParams(max_tokens=3))
    assert wait_gone(pids, 2.0) == []
    with pytest.raises(StepFailedError, match="workers are stopped") as failed:
        llm.generate([8, 9], SamplingParams(max_tokens=2))
    assert isinstance(failed.value.cause, WorkerError)
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
