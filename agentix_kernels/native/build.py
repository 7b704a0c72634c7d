"""Build and load the native CPU kernels: C compiled on first use, like Triton's JIT.

`native_library()` compiles `SOURCES` (which include `HEADERS`) into one library with the system C compiler (`$CC`, else
`cc`) for this CPU (`-O3 -march=native -ffast-math`, OpenMP), linked against the OpenMP runtime
torch itself loaded, so the kernel's threads are torch's threads (one team per calling thread,
never two runtimes fighting over the cores). The library is cached under
`$AGENTIX_CACHE/kernels` (else `~/.cache/agentix/kernels`), named by a hash of the source, the
flags, the compiler and the CPU, and written by an atomic rename (processes may build at once).

Returns None, after one warning, when the library cannot be had: no compiler, a failed build,
no OpenMP runtime under torch (not Linux, or a torch without OpenMP), or
`AGENTIX_NATIVE_CPU=0` in the environment. Callers then use the torch references.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import subprocess
import tempfile
import warnings
from pathlib import Path

import torch

SOURCES = tuple(Path(__file__).with_name(name)
                for name in ("decode_attention_cpu.c", "greedy_screen_cpu.c"))
HEADERS = (Path(__file__).with_name("bf16.h"),)  # included by the sources: in the cache key
CFLAGS = ("-O3", "-march=native", "-ffast-math", "-fPIC", "-std=c11")


@functools.cache
def native_library() -> ctypes.CDLL | None:
    """The loaded kernels (their argument types set), or None (see the module docstring).
    Built at most once per process."""
    if os.environ.get("AGENTIX_NATIVE_CPU", "1") == "0":
        return None
    try:
        library = ctypes.CDLL(str(_built_library()))
    except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
        warnings.warn(f"native CPU kernels unavailable, using the torch references: {exc}",
                      RuntimeWarning, stacklevel=2)
        return None
    _declare(library)
    return library


def _built_library() -> Path:
    """The cached shared library, compiled first when absent."""
    compiler = os.environ.get("CC", "cc")
    runtime = openmp_runtime()
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True,
                             check=True, timeout=30).stdout
    sources = [source.read_text() for source in (*SOURCES, *HEADERS)]
    key = hashlib.sha256("\0".join([*sources, " ".join(CFLAGS), compiler, version, runtime,
                                    _cpu_flags()]).encode()).hexdigest()[:16]
    target = _cache_dir() / f"kernels_cpu-{key}.so"
    if not target.exists():
        _compile(compiler, runtime, target)
    return target


def _compile(compiler: str, runtime: str, target: Path) -> None:
    """Compile each source with OpenMP, link them against `runtime` (not the compiler's own
    copy), rename in."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        objects = [str(Path(tmp) / f"{source.stem}.o") for source in SOURCES]
        lib = Path(tmp) / "kernels.so"
        for command in (
                *([compiler, *CFLAGS, "-fopenmp", "-c", str(source), "-o", obj]
                  for source, obj in zip(SOURCES, objects)),
                [compiler, "-shared", *objects, runtime, f"-Wl,-rpath,{Path(runtime).parent}",
                 "-lm", "-o", str(lib)]):
            done = subprocess.run(command, capture_output=True, text=True, timeout=120)
            if done.returncode != 0:
                raise RuntimeError(f"{' '.join(command)} failed: {done.stderr.strip()[-2000:]}")
        os.replace(lib, target)


def openmp_runtime() -> str:
    """The path of the OpenMP runtime torch's own library uses (other packages may map
    their own copies, e.g. sentencepiece's libgomp): where `omp_get_max_threads`, looked up
    from libtorch_cpu, resolves."""
    torch_cpu = Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"
    try:
        address = ctypes.cast(ctypes.CDLL(str(torch_cpu)).omp_get_max_threads,
                              ctypes.c_void_p).value
    except (OSError, AttributeError) as exc:
        raise RuntimeError(f"cannot find the OpenMP runtime of {torch_cpu}: {exc}") from exc
    info = _DlInfo()
    if not ctypes.CDLL(None).dladdr(ctypes.c_void_p(address), ctypes.byref(info)):
        raise RuntimeError("dladdr cannot name the library of torch's omp_get_max_threads")
    return os.fsdecode(info.dli_fname)


class _DlInfo(ctypes.Structure):
    """glibc's `Dl_info`, filled by `dladdr`."""

    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


def _cpu_flags() -> str:
    """This CPU's feature flags (part of the cache key: the build is for this CPU)."""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith(("flags", "Features")):
            return line
    return ""


def _cache_dir() -> Path:
    root = os.environ.get("AGENTIX_CACHE")
    return (Path(root) if root else Path.home() / ".cache" / "agentix") / "kernels"


def _declare(library: ctypes.CDLL) -> None:
    """Set the C signature of each kernel (ctypes checks the arguments against it)."""
    pointer, i64 = ctypes.c_void_p, ctypes.c_int64
    fn = library.paged_decode_attention_cpu
    fn.restype = ctypes.c_int
    fn.argtypes = [pointer, pointer, pointer, ctypes.c_int, i64, i64, i64, i64, pointer, i64,
                   i64, pointer, i64, i64, i64, i64, i64, ctypes.c_float, i64, ctypes.c_int,
                   pointer]
    fn = library.greedy_screen_bf16
    fn.restype = ctypes.c_int
    fn.argtypes = [pointer, pointer, pointer, i64, pointer, i64, i64, i64, ctypes.c_float,
                   ctypes.c_float, ctypes.c_float, ctypes.c_int, pointer]
