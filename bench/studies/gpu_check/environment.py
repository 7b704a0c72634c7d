"""Step `env`: the versions and devices the other steps run on; FAIL without CUDA."""

from __future__ import annotations

import argparse
import platform

from bench.studies.gpu_check.step import Outcome, Step, require

LIBRARIES = ("torch", "triton", "transformers")


def resolve(args: argparse.Namespace) -> str:
    require(*LIBRARIES)
    return "torch, triton, transformers import"


def run(args: argparse.Namespace) -> Outcome:
    import importlib

    import torch

    data = {"python": platform.python_version(),
            **{name: importlib.import_module(name).__version__ for name in LIBRARIES},
            "cuda": torch.version.cuda, "devices": [
                {"name": torch.cuda.get_device_name(i),
                 "memory_gib": round(torch.cuda.get_device_properties(i).total_memory / 2**30, 1)}
                for i in range(torch.cuda.device_count())]}
    versions = ", ".join(f"{name} {data[name]}" for name in LIBRARIES)
    if not data["devices"]:
        return Outcome("FAIL", f"no CUDA device ({versions})", data)
    names = ", ".join(sorted({d["name"] for d in data["devices"]}))
    return Outcome("ok", f"{len(data['devices'])} x {names}; {versions}, CUDA {data['cuda']}",
                   data)


STEP = Step(__doc__, lambda parser: None, resolve, run)

if __name__ == "__main__":
    raise SystemExit(STEP.main())
