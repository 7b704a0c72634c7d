"""The machine's CPU as studies name it beside their figures."""

from __future__ import annotations

import os
from pathlib import Path


def cpu_model(cpuinfo: str | None = None) -> str:
    """"N-core MODEL (family F, model M)" from the first processor of `cpuinfo` (default: read
    /proc/cpuinfo): "unknown CPU" without a model name, the parenthesis without a family. A
    VM's model name is often masked ("AMD EPYC"); its family and model still tell one CPU
    generation from another (AMD family 25 is Zen 3/4, 26 is Zen 5)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            cpuinfo = ""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        if not line.strip():
            break  # the first processor's fields end at its blank line
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    name = f"{os.cpu_count()}-core {fields.get('model name') or 'unknown CPU'}"
    if fields.get("cpu family"):
        return f"{name} (family {fields['cpu family']}, model {fields.get('model', '?')})"
    return name
