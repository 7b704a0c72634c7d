"""Compile every Triton kernel for a CUDA target on a machine with no GPU (Triton IR to PTX).

The interpreter that runs the kernel tests on CPU never builds Triton IR, so a kernel can pass
every CPU test and still fail to compile on a GPU (it happened: a constexpr `if` that returned
early left an fp32 dot of bf16 operands behind it). This check runs the same compiler stages a
GPU launch runs, up to PTX, for each kernel with fp32, fp16 and bf16 caches and the
constexprs its launcher passes on a GPU.

    python -m agentix_kernels.cuda_compile_check [--arch 90]
        one line per case, `ok NAME` or `FAIL NAME: error`; exit status 1 if any failed.

Must run with TRITON_INTERPRET unset (an interpreted kernel has no IR); needs only the triton
wheel (its bundled NVIDIA backend), no driver.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field

_DTYPES = {"fp32": "*fp32", "fp16": "*fp16", "bf16": "*bf16"}


@dataclass(frozen=True)
class KernelCase:
    """One kernel launch shape: which pointers hold cache-dtype data, the other pointers'
    types, which scalars are floats, and the constexprs (NATIVE_DOT is added per dtype)."""

    module: str
    kernel: str
    data_pointers: tuple[str, ...]
    other_pointers: dict[str, str] = field(default_factory=dict)
    float_scalars: tuple[str, ...] = ()
    constexprs: dict[str, object] = field(default_factory=dict)
    native_dot: bool = False


_CASES = (
    KernelCase("agentix_kernels._decode_attention_triton", "_paged_decode_kernel",
               ("q_ptr", "k_ptr", "v_ptr", "out_ptr"),
               {"block_tables_ptr": "*i32", "context_lens_ptr": "*i32", "m_ptr": "*fp32",
                "l_ptr": "*fp32", "acc_ptr": "*fp32"}, ("qk_scale",),
               dict(GROUP=3, GROUP_PAD=16, HEAD_DIM=64, HEAD_DIM_PAD=64, BLOCK_SIZE=16,
                    BLOCK_N=16, SPLIT=True), native_dot=True),
    KernelCase("agentix_kernels._decode_attention_triton", "_combine_splits_kernel",
               ("out_ptr",), {"m_ptr": "*fp32", "l_ptr": "*fp32", "acc_ptr": "*fp32",
                              "context_lens_ptr": "*i32"}, (),
               dict(HEAD_DIM=64, HEAD_DIM_PAD=64, MAX_SPLITS=16)),
    KernelCase("agentix_kernels._prefill_attention_triton", "_paged_prefill_kernel",
               ("q_ptr", "k_ptr", "v_ptr", "out_ptr"),
               {"block_tables_ptr": "*i32", "context_lens_ptr": "*i32",
                "query_start_loc_ptr": "*i32"}, ("qk_scale",),
               dict(GROUP=3, HEAD_DIM=64, HEAD_DIM_PAD=64, BLOCK_M=16, BLOCK_N=16),
               native_dot=True),
    KernelCase("agentix_kernels._store_kv_triton", "_store_kvcache_kernel",
               ("key_ptr", "value_ptr", "k_cache_ptr", "v_cache_ptr"), {"slot_ptr": "*i64"}, (),
               dict(BLOCK_SIZE=16, HEAD_DIM=64, HEAD_DIM_PAD=64)),
    KernelCase("agentix_kernels._block_copy_triton", "_copy_rows_kernel",
               ("src_ptr", "dst_ptr"), {"ids_ptr": "*i64"}, (), dict(GATHER=True, BLOCK=1024)),
)


def _signature(arg_names, case: KernelCase, dtype: str, constexprs: dict) -> dict[str, str]:
    sig = {}
    for name in arg_names:
        if name in constexprs:
            sig[name] = "constexpr"
        elif name in case.data_pointers:
            sig[name] = _DTYPES[dtype]
        elif name in case.other_pointers:
            sig[name] = case.other_pointers[name]
        elif name in case.float_scalars:
            sig[name] = "fp32"
        else:
            sig[name] = "i32"
    return sig


def compile_case(case: KernelCase, dtype: str, arch: int) -> None:
    """Build `case` for `dtype` through every stage up to PTX; raises what the compiler raises."""
    import importlib

    from triton._C.libtriton import ir
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia.compiler import CUDABackend
    from triton.compiler import ASTSource

    kernel = getattr(importlib.import_module(case.module), case.kernel)
    constexprs = dict(case.constexprs)
    if case.native_dot:
        constexprs["NATIVE_DOT"] = dtype != "fp32"  # what native_dot() says on a GPU
    names = kernel.arg_names
    source = ASTSource(kernel, _signature(names, case, dtype, constexprs),
                       {(names.index(k),): v for k, v in constexprs.items()})
    target = GPUTarget("cuda", arch, 32)
    backend = CUDABackend(target)
    options = backend.parse_options({})
    context = ir.context()
    ir.load_dialects(context)
    backend.load_dialects(context)
    module = source.make_ir(target, options, backend.get_codegen_implementation(options),
                            backend.get_module_map(), context)
    stages: dict = {}
    backend.add_stages(stages, options, source.language)
    metadata: dict = {}
    for stage in ("ttir", "ttgir", "llir", "ptx"):
        module = stages[stage](module, metadata)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", type=int, default=90, help="compute capability, e.g. 80, 90")
    args = parser.parse_args(argv)
    if os.environ.get("TRITON_INTERPRET", "") not in ("", "0"):
        parser.error("TRITON_INTERPRET is set: interpreted kernels have no IR to compile")
    failed = 0
    for case in _CASES:
        for dtype in _DTYPES:
            name = f"{case.kernel}[{dtype}]"
            try:
                compile_case(case, dtype, args.arch)
                print(f"ok {name}", flush=True)
            except Exception as exc:  # noqa: BLE001 - every compiler error is a result here
                failed += 1
                print(f"FAIL {name}: {type(exc).__name__}: {str(exc).splitlines()[-1:]}",
                      flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
