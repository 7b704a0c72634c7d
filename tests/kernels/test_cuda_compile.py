"""Every Triton kernel compiles to PTX for Hopper and Ampere with fp32, fp16 and bf16 caches,
on this GPU-less machine: the interpreter the other kernel tests use never builds Triton IR."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

KERNELS = ("_paged_decode_kernel", "_combine_splits_kernel", "_paged_prefill_kernel",
           "_store_kvcache_kernel", "_copy_rows_kernel")


@pytest.mark.parametrize("arch", [90, 80])
def test_every_kernel_compiles_for_cuda(arch):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, "-m", "agentix_kernels.cuda_compile_check",
                           "--arch", str(arch)], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    expected = [f"ok {kernel}[{dtype}]" for kernel in KERNELS for dtype in ("fp32", "fp16", "bf16")]
    assert proc.stdout.split("\n")[:-1] == expected


def test_refuses_to_run_interpreted():
    env = dict(os.environ, TRITON_INTERPRET="1")
    proc = subprocess.run([sys.executable, "-m", "agentix_kernels.cuda_compile_check"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "TRITON_INTERPRET is set" in proc.stderr
