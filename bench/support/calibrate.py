"""Calibration: fit the simulator's cost model to the real engine on this machine.

- `measure_steps` runs probe batches on the real engine (single prefill chunks of several
  sizes; decode batches of several sizes at several contexts, with the multi-chunk prefill that
  starts them; decodes with a prefill chunk beside them), each scenario `repeats` times, and
  returns one `StepSample` per distinct step: its chunk shapes, whether it started a scheduling
  round, and the median wall time of the executor (model step, swaps, sampling; the engine's
  own scheduling and bookkeeping add well under a millisecond a step on top).
- `bench.support.step_fit.fit_step_times` fits `CostModel`'s roofline constants to them.
- `measure_swaps` times the runner's bulk swap of a few block counts and fits
  `latency + blocks * bytes_per_block / bandwidth`.

`calibrate` does all three on a fresh engine. A `Calibration` (saved as JSON) rebuilds the
calibrated `CostModel` for `simulate(..., cost_model=...)`; to check it against the real engine
(`bench.support.real_run.run_real`, compared by `bench.analysis.calibration_check`), pass the same
`check_overrides(...)` (KV blocks included) to both runs.
"""

from __future__ import annotations

import itertools
import json
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from engine.llm_engine import LLMEngine
from engine.sampling_params import SamplingParams

from bench.sim.baselines import engine_config_for
from bench.sim.cost_model import CostModel, ModelPreset
from bench.sim.simulate import PromptMaker
from bench.sim.trace import TraceCall
from bench.support.real_run import StepRecorder, real_engine
from bench.support.step_fit import (Fit, Shape, StepSample, cpu_preset, fit_step_times,
                                    model_preset_for)


# ----- probes -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Probes:
    """The probe scenarios: single prefill chunks of `prefill_sizes` tokens; for each batch x
    context, `batch` calls of `context` prompt tokens (one multi-chunk prefill step) that
    then decode `decode_steps` tokens, the first decode step joined (if `mixed_chunk` > 0) by
    a one-token call of `mixed_chunk` prompt tokens."""

    prefill_sizes: tuple[int, ...] = (16, 32, 64, 128, 256)
    batches: tuple[int, ...] = (1, 2, 4)
    contexts: tuple[int, ...] = (32, 256)
    decode_steps: int = 4
    mixed_chunk: int = 32
    repeats: int = 3

    @classmethod
    def up_to(cls, max_num_seqs: int, **fields: Any) -> "Probes":
        """Probes whose decode batches are the powers of two below `max_num_seqs`, and it."""
        batches = [b for b in (1, 2, 4, 8, 16, 32, 64, 128) if b < max_num_seqs]
        return cls(batches=(*batches, max_num_seqs), **fields)

    def scenarios(self) -> list[tuple[list[int], int, int]]:
        """(prompt lengths, max_tokens, late prompt length or 0) of every scenario."""
        return [([n], 1, 0) for n in self.prefill_sizes] + [
            ([ctx] * b, 1 + self.decode_steps, self.mixed_chunk)
            for b in self.batches for ctx in self.contexts]


def probe_config(base: dict[str, Any], probes: Probes) -> dict[str, Any]:
    """The engine config for probing: `base` (dtype, block size, KV blocks, multistep...)
    with FCFS, no prefix caching (every prompt computes) and budgets that fit each probe."""
    largest = max(max(probes.prefill_sizes, default=1),
                  max(probes.batches) * max(probes.contexts) + probes.mixed_chunk)
    return {**base, "policy": "fcfs", "enable_prefix_caching": False,
            "enable_chunked_prefill": True,
            "max_num_batched_tokens": max(base.get("max_num_batched_tokens", 1), largest),
            "max_num_seqs": max(base.get("max_num_seqs", 1), max(probes.batches) + 1)}


def measure_steps(engine: LLMEngine, recorder: StepRecorder,
                  probes: Probes = Probes()) -> list[StepSample]:
    """Run the probe scenarios on `engine` (idle, its executor wrapped by `recorder`) and
    return one sample per distinct step (shapes and round): the median of its repeats."""
    prompts = PromptMaker(engine.vocab_size)
    serial = iter(range(1 << 30))
    recorder.record, first_sample = True, len(recorder.samples)
    for _ in range(probes.repeats):
        for lengths, max_tokens, late in probes.scenarios():
            params = SamplingParams(max_tokens=max_tokens, ignore_eos=True)
            for n in lengths:
                engine.add_call(None, _probe_prompt(prompts, next(serial), n), params)
            for step in itertools.count():
                if not engine.has_unfinished_calls():
                    break
                for out in engine.step():
                    if out.finished:
                        engine.pop_completion(out.call_id)
                if step == 0 and late:
                    engine.add_call(None, _probe_prompt(prompts, next(serial), late),
                                    SamplingParams(max_tokens=1, ignore_eos=True))
    times: dict[tuple[Shape, bool], list[float]] = {}
    for sample in recorder.samples[first_sample:]:
        times.setdefault((sample.chunks, sample.new_round), []).append(sample.seconds)
    return [StepSample(shape, new_round, statistics.median(ts))
            for (shape, new_round), ts in sorted(times.items())]


def _probe_prompt(prompts: PromptMaker, index: int, length: int) -> list[int]:
    """A made-up prompt of `length` tokens, as the index-th program's (no prefix caching in
    probes, so sharing would not matter)."""
    return prompts.prompt(index, TraceCall("probe", length, 1))


def measure_swaps(engine: LLMEngine, block_counts: Iterable[int] = (1, 8, 32),
                  repeats: int = 5) -> tuple[float, float]:
    """(bandwidth in bytes/s, per-transfer latency in s) of the runner's bulk swap, from the
    median time of swapping out and in `block_counts` blocks (free blocks: nothing live is
    touched). Needs `num_host_blocks` >= the largest count."""
    runner = engine.runner
    bytes_per_block = runner.kv_cache[0].numel() * runner.kv_cache.element_size()
    counts, seconds = [], []
    for k in block_counts:
        pairs = [(1 + i, i) for i in range(k)]
        ts = []
        for _ in range(repeats):
            started = time.perf_counter()
            runner.swapper.swap_out(pairs)
            runner.swapper.swap_in([(h, d) for d, h in pairs])
            ts.append((time.perf_counter() - started) / 2)
        counts.append(k)
        seconds.append(statistics.median(ts))
    slope, intercept = np.polyfit(np.array(counts, float), np.array(seconds), 1)
    bandwidth = bytes_per_block / slope if slope > 0 else float("inf")
    return float(min(bandwidth, 1e12)), float(max(intercept, 0.0))


# ----- the calibration ------------------------------------------------------------------
@dataclass(frozen=True)
class Calibration:
    """The fitted constants for one model on this machine, and how they were measured."""

    model: ModelPreset
    fit: Fit
    host_link_bandwidth: float
    per_transfer_latency: float
    torch_threads: int
    model_dir: str = ""
    seconds: float = 0.0

    def cost_model(self) -> CostModel:
        gpu = cpu_preset(self.fit.flops_rate, self.fit.byte_rate, self.host_link_bandwidth,
                         self.per_transfer_latency)
        return CostModel(gpu, self.model, self.fit.step_overhead, self.fit.schedule_overhead)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Calibration":
        return cls(**{**data, "model": ModelPreset(**data["model"]), "fit": Fit(**data["fit"])})


def save_calibration(calibration: Calibration, path: str | Path,
                     extra: dict[str, Any] | None = None) -> None:
    """Write the calibration (and `extra`, e.g. the check's figures, under "check")."""
    data = calibration.to_json()
    if extra is not None:
        data["check"] = extra
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(data, indent=1) + "\n")


def load_calibration(path: str | Path) -> Calibration:
    data = json.loads(Path(path).read_text())
    data.pop("check", None)
    return Calibration.from_json(data)


def calibrate(model_dir: str | Path, engine_fields: dict[str, Any],
              probes: Probes | None = None) -> tuple[Calibration, list[StepSample]]:
    """Probe a fresh engine over `model_dir` configured with `engine_fields` (as for the runs
    to predict: dtype, block size, KV and host blocks, max_num_seqs, multistep) and fit the
    cost model. Default probes: `Probes.up_to(max_num_seqs)`."""
    import torch

    started = time.perf_counter()
    if probes is None:
        probes = Probes.up_to(engine_fields.get("max_num_seqs", 8))
    config = probe_config(engine_config_for("fcfs", {"dtype": "float32", **engine_fields}),
                          probes)
    engine, recorder = real_engine(model_dir, config)
    samples = measure_steps(engine, recorder, probes)
    bandwidth, latency = (measure_swaps(engine) if config.get("num_host_blocks", 0) >= 32
                          else (10e9, 0.0))
    model = model_preset_for(model_dir, engine.runner.kv_cache.element_size())
    calibration = Calibration(model, fit_step_times(samples, model), bandwidth, latency,
                              torch.get_num_threads(), str(model_dir),
                              time.perf_counter() - started)
    return calibration, samples


# ----- the check: the same engine overrides for the real and the simulated run ---------
def check_overrides(calibration: Calibration, **fields: Any) -> dict[str, Any]:
    """Engine overrides for both sides of a check: `fields` plus the swap/recompute estimates
    the simulator would take from the cost model, so both engines decide alike."""
    cost = calibration.cost_model()
    return {"dtype": "float32", "host_link_bandwidth": calibration.host_link_bandwidth,
            "swap_latency": calibration.per_transfer_latency,
            "prefill_tokens_per_second": cost.prefill_tokens_per_second, **fields}
