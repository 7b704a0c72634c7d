"""The machine's CPU as studies name it beside their figures."""

from __future__ import annotations

import os
from pathlib import Path


def cpu_model() -> str:
    """"N-core MODEL" from /proc/cpuinfo's first "model name" ("unknown CPU" without one)."""
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()}-core {model}"
