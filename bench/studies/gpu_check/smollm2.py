"""SmolLM2-135M-Instruct for the steps: the HF directory of `engine.models.smollm2`."""

from __future__ import annotations

from bench.studies.gpu_check.step import Unresolved, require


def locate() -> str:
    """Dry run: where SmolLM2 is, or where it will be converted from; Unresolved if neither
    the converted directory ($AGENTIX_CACHE or ~/.cache/agentix) nor the GGUF package is here."""
    require("engine.models.smollm2")
    from engine.models import smollm2

    model_dir = smollm2.default_cache_dir()
    if smollm2.is_complete(model_dir):
        return f"SmolLM2 at {model_dir}"
    try:
        source = smollm2.gguf_path()
    except FileNotFoundError as exc:
        raise Unresolved(f"SmolLM2 is neither converted at {model_dir} nor installable: {exc}; "
                         "set AGENTIX_CACHE to a folder holding smollm2-135m-instruct/") from exc
    require("gguf")
    return f"SmolLM2 will be converted from {source} into {model_dir}"


def model_dir() -> str:
    """The converted directory (converting the GGUF file on first use)."""
    from engine.models.smollm2 import ensure_smollm2_dir

    return str(ensure_smollm2_dir())
