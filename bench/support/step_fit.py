"""The step-time fit: `CostModel`'s roofline constants fitted to measured steps.

`fit_step_times` takes `StepSample`s (each step's `(num_new_tokens, context_len)` chunks,
whether it started a scheduling round, its wall seconds) and a `ModelPreset`, and returns a
`Fit`: the constants of `step_overhead [+ schedule_overhead] + max(flops / flops_rate,
bytes / byte_rate)` that minimise the squared relative error, and that error.
For given rates each step is compute- or memory-bound by whether its flops/bytes ratio is
above `flops_rate / byte_rate`, so there are only as many assignments as distinct ratios; for
each the model is linear in (1/flops_rate, 1/byte_rate, the overheads) and least squares solves
it in closed form (numpy). The best assignment wins; noiseless steps of a known cost model give
its constants back exactly.

`cpu_preset` turns fitted rates into the `GPUPreset` of a calibrated CPU, and `model_preset_for`
reads a model directory's `ModelPreset`: the presets the fit and the calibrated cost model use.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from bench.sim.cost_model import CostModel, GPUPreset, ModelPreset, batch_totals

GiB = 2**30
Shape = tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class StepSample:
    """One measured step: `(num_new_tokens, context_len)` per chunk, whether it began a
    scheduling round, and its wall time in seconds."""

    chunks: Shape
    new_round: bool
    seconds: float


@dataclass(frozen=True)
class Fit:
    """Fitted constants and how well they fit the samples (relative errors)."""

    flops_rate: float
    byte_rate: float
    step_overhead: float
    schedule_overhead: float
    rms_rel_error: float
    max_rel_error: float
    num_samples: int


def cpu_preset(flops_rate: float, byte_rate: float, host_link_bandwidth: float = 10e9,
               per_transfer_latency: float = 0.0, memory_bytes: float = 64 * GiB,
               host_memory_bytes: float = 64 * GiB) -> GPUPreset:
    """A `GPUPreset` for a calibrated CPU: the fitted rates as peak (efficiency 1) and
    bandwidth. Memory only sizes pools the simulator would pick itself; calibration checks
    pass the real engine's block counts instead."""
    return GPUPreset("cpu-calibrated", flops_rate, 1.0, byte_rate, memory_bytes,
                     host_link_bandwidth, per_transfer_latency, host_memory_bytes)


def model_preset_for(model_dir: str | Path, dtype_bytes: int = 4) -> ModelPreset:
    """The `ModelPreset` of a model directory's `config.json` (float32 by default)."""
    path = Path(model_dir)
    cfg = json.loads((path / "config.json").read_text())
    return ModelPreset.from_hf_config(path.name, cfg, dtype_bytes)



def fit_step_times(samples: Sequence[StepSample], model: ModelPreset,
                   weigh_by_calls: bool = False) -> Fit:
    """Least-squares fit (relative error) of the roofline constants to `samples` (see the
    module docstring). With `weigh_by_calls`, a step's squared error counts once per chunk
    (call) in it, as every call in a step waits for all of it (on SmolLM2 on a CPU that fits
    a saturated engine better and a lightly loaded one worse: a lone decode is far cheaper
    than the roofline's floor). Raises ValueError if the samples cannot determine both rates
    (they need compute-bound and memory-bound steps) or a time is not positive."""
    if len(samples) < 4:
        raise ValueError(f"samples: need at least 4 steps to fit 4 constants, got {len(samples)}")
    reference = CostModel(cpu_preset(1.0, 1.0), model, 0.0, 0.0)
    work = np.array([reference.step_work(*batch_totals(s.chunks)) for s in samples], dtype=float)
    flops, nbytes = work[:, 0], work[:, 1]
    new_round = np.array([float(s.new_round) for s in samples])
    seconds = np.array([s.seconds for s in samples], dtype=float)
    if not (seconds > 0).all():
        raise ValueError("samples: every step time must be positive")
    weight = np.sqrt([float(len(s.chunks)) if weigh_by_calls else 1.0 for s in samples])
    ratio = flops / nbytes
    best: tuple[float, np.ndarray] | None = None
    # Overhead columns tried: the step overhead alone, both, the round overhead alone, none (a
    # later fit must be strictly better, so collinear columns resolve to the step overhead).
    variants = ((True, False), (True, True), (False, True), (False, False))
    for threshold in np.unique(ratio)[:-1]:
        compute = ratio > threshold
        base = [flops * compute, nbytes * ~compute]
        for use_step, use_round in variants:
            columns = base + ([np.ones_like(seconds)] if use_step else []) \
                + ([new_round] if use_round else [])
            x = np.stack(columns, axis=1) * (weight / seconds)[:, None]
            coef = np.linalg.lstsq(x, weight, rcond=None)[0]
            rest = iter(coef[2:])
            params = np.array([coef[0], coef[1], next(rest) if use_step else 0.0,
                               next(rest) if use_round else 0.0])
            if params[0] <= 0 or params[1] <= 0 or (params[2:] < 0).any():
                continue
            error = _relative_errors(params, flops, nbytes, new_round, seconds) * weight
            sse = float((error ** 2).sum())
            if best is None or sse < best[0] * (1 - 1e-9):
                best = (sse, params)
    if best is None:
        raise ValueError("samples: no fit with positive rates; the probes need both "
                         "compute-bound (large prefill) and memory-bound (decode) steps")
    params = best[1]
    error = _relative_errors(params, flops, nbytes, new_round, seconds)
    return Fit(flops_rate=float(1 / params[0]), byte_rate=float(1 / params[1]),
               step_overhead=float(params[2]), schedule_overhead=float(params[3]),
               rms_rel_error=float(np.sqrt((error ** 2).mean())),
               max_rel_error=float(np.abs(error).max()), num_samples=len(samples))


def _relative_errors(params: np.ndarray, flops: np.ndarray, nbytes: np.ndarray,
                     new_round: np.ndarray, seconds: np.ndarray) -> np.ndarray:
    predicted = params[2] + params[3] * new_round + np.maximum(flops * params[0],
                                                               nbytes * params[1])
    return (predicted - seconds) / seconds

