"""Memory-pressure presets: a simulated engine with a fraction of its preset's device KV blocks.

A simulated engine gets every block that fits beside the weights (`CostModel.kv_blocks`:
(GPU memory x tp - weight bytes) x 0.9 / bytes per block: 27,440 blocks of 16 tokens, 439k
tokens, for Llama-3.1-8B on the A100-80GB), which the paper's workloads never fill. A
pressure of 1/4 or 1/8 keeps that fraction (rounded down), as a smaller GPU or a larger model
would, and leaves the host (swap) pool as it is. `--memory-pressure` on `agentix bench sim`
and `capacity` turns it into a `num_kv_blocks` override (`kv_block_overrides`); an explicit
`--set num_kv_blocks=N` wins over it.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from bench.sim.baselines import BLOCK_SIZE
from bench.sim.cost_model import CostModel

PRESETS = ("1", "1/4", "1/8")  # the named pressures; any fraction in (0, 1] is accepted


def parse_memory_pressure(text: str) -> float:
    """A fraction in (0, 1] written `1/4`, `1/8` or `0.25`; ValueError naming the field."""
    try:
        value = Fraction(text.strip())
    except (ValueError, ZeroDivisionError):
        raise ValueError(f"memory_pressure: expected a fraction such as {', '.join(PRESETS)} "
                         f"or 0.25, got {text!r}") from None
    if not 0 < value <= 1:
        raise ValueError(f"memory_pressure: must be in (0, 1], got {text!r}")
    return float(value)


def kv_blocks_at(fraction: float, preset: str, model: str, block_size: int = BLOCK_SIZE) -> int:
    """The device KV blocks of `model` on `preset` at `fraction` of the default (rounded
    down); ValueError when fewer than 2 remain (the engine's minimum)."""
    if not 0 < fraction <= 1:
        raise ValueError(f"memory_pressure: must be in (0, 1], got {fraction}")
    blocks = int(CostModel.from_names(preset, model).kv_blocks(block_size) * fraction)
    if blocks < 2:
        raise ValueError(f"memory_pressure: {fraction:g} leaves {blocks} KV blocks of "
                         f"{model} on {preset}; the engine needs at least 2")
    return blocks


def kv_block_overrides(fraction: float, preset: str, model: str,
                       block_size: int = BLOCK_SIZE) -> dict[str, Any]:
    """The engine override of a pressure: `{"num_kv_blocks": kv_blocks_at(...)}`, or `{}` at
    1 (the default is left to the simulator)."""
    if fraction == 1:
        return {}
    return {"num_kv_blocks": kv_blocks_at(fraction, preset, model, block_size)}
