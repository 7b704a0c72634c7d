"""Calibration: fit the simulator's cost model to the real engine on this machine, and check the
calibrated simulator against the real engine on the same (scaled-down) trace.

- `measure_steps` runs probe batches on the real engine (single prefill chunks of several
  sizes; decode batches of several sizes at several contexts, with the multi-chunk prefill that
  starts them; decodes with a prefill chunk beside them), each scenario `repeats` times, and
  returns one `StepSample` per distinct step: its chunk shapes, whether it started a scheduling
  round, and the median wall time of the executor (model step, swaps, sampling; the engine's
  own scheduling and bookkeeping add well under a millisecond a step on top).
- `fit_step_times` fits `CostModel`'s roofline `step_overhead [+ schedule_overhead] +
  max(flops / flops_rate, bytes / byte_rate)` to them, minimising the squared relative error.
  For given rates each step is compute- or memory-bound by whether its flops/bytes ratio is
  above `flops_rate / byte_rate`, so there are only as many assignments as distinct ratios;
  for each the model is linear in (1/flops_rate, 1/byte_rate, the overheads) and least squares
  solves it in closed form (numpy). The best assignment wins; noiseless steps of a known cost
  model give its constants back exactly.
- `measure_swaps` times the runner's bulk swap of a few block counts and fits
  `latency + blocks * bytes_per_block / bandwidth`.
- `run_real` replays a trace on the real engine in real time with the simulator's own driver
  (`bench.simulate.Driver`) on a `bench.wall_clock.WallClock`: idle time is skipped, busy
  time is real.

A `Calibration` (saved as JSON) rebuilds the calibrated `CostModel` for `simulate(...,
cost_model=...)`; pass the same `engine_overrides` (KV blocks included) to both runs.
"""

from __future__ import annotations

import itertools
import json
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from engine.config import EngineConfig
from engine.executor import Executor, StepResult
from engine.llm_engine import LLMEngine
from engine.sampling_params import SamplingParams
from scheduler.plan import SchedulePlan

from bench.cost_model import CostModel, GPUPreset, ModelPreset, batch_totals, chunk_shapes
from bench.metrics import compute_metrics
from bench.simulate import SimResult, Driver, PromptMaker, engine_config_for
from bench.trace import Trace, TraceCall
from bench.wall_clock import WallClock

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


# ----- fitting ----------------------------------------------------------------------------
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


# ----- the real engine ------------------------------------------------------------------
class StepRecorder:
    """Wraps the engine's real executor with the counters the simulator's driver and results
    read (`num_steps`: non-empty plans; swap transfers and seconds; busy seconds). With
    `record`, every step that runs chunks is kept in `samples` (its wall time is that of the
    executor: the model step, the swaps and sampling)."""

    def __init__(self, inner: Executor, record: bool = False) -> None:
        self.inner = inner
        self.record = record
        self.samples: list[StepSample] = []
        self.num_steps = 0
        self.num_swap_transfers = 0
        self.swap_seconds_total = 0.0
        self.busy_seconds = 0.0

    def execute(self, plan: SchedulePlan) -> StepResult:
        started = time.perf_counter()
        result = self.inner.execute(plan)
        seconds = time.perf_counter() - started
        self.busy_seconds += seconds
        if not plan.is_empty:
            self.num_steps += 1
        self.num_swap_transfers += bool(plan.swap_out) + bool(plan.swap_in)
        self.swap_seconds_total += result.swap_seconds
        if self.record and plan.chunks:
            self.samples.append(StepSample(tuple(chunk_shapes(plan.chunks)),
                                           not plan.is_continuation, seconds))
        return result


def real_engine(model_dir: str | Path, config: dict[str, Any],
                clock: Any = time.monotonic) -> tuple[LLMEngine, StepRecorder]:
    """An engine with its real ModelRunner, whose executor is wrapped in a `StepRecorder`."""
    engine = LLMEngine(EngineConfig(model=str(model_dir), **config), clock=clock)
    recorder = StepRecorder(engine.executor)
    engine.executor = recorder
    return engine, recorder


def run_real(trace: Trace, policy: str, model_dir: str | Path,
             engine_overrides: dict[str, Any] | None = None) -> SimResult:
    """Replay `trace` on the real engine (real model, real time; idle time skipped) with the
    simulator's driver, under the baseline `policy` with `engine_overrides` (float32 unless
    they say otherwise). Returns a `SimResult` whose times are wall seconds since the run
    began; raises like `simulate` (stuck engine, integrity)."""
    wall_start = time.perf_counter()
    config = engine_config_for(policy, {"dtype": "float32", **(engine_overrides or {})})
    if config["policy"] == "oracle":
        raise ValueError("policy: the oracle is simulation-only (it needs each program's work)")
    if not config["enable_chunked_prefill"]:  # as simulate(): one step holds a whole prompt
        longest = max((c.prompt_len for p in trace.programs for c in p.calls), default=1)
        config["max_num_batched_tokens"] = max(config["max_num_batched_tokens"], longest)
    clock = WallClock()
    engine, recorder = real_engine(model_dir, config, clock)
    driver = Driver(engine, clock, None, PromptMaker(engine.vocab_size), use_oracle=False)
    clock.restart(0.0)
    driver.run(trace)
    engine.check_integrity()
    scheduler = engine.scheduler
    return SimResult(
        policy=policy, preset="real", model=Path(model_dir).name, programs=driver.results,
        call_finish=driver.call_finish, call_start=driver.call_start,
        num_steps=recorder.num_steps, num_rounds=scheduler.num_rounds,
        num_preemptions=scheduler.num_preemptions, num_swap_outs=scheduler.num_swap_outs,
        num_swap_transfers=recorder.num_swap_transfers,
        swap_seconds=recorder.swap_seconds_total, busy_seconds=recorder.busy_seconds,
        end_time=clock(), wall_seconds=time.perf_counter() - wall_start,
        num_kv_blocks=engine.kv.pool.num_blocks)


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


# ----- the check: real engine vs calibrated simulator -----------------------------------
def check_overrides(calibration: Calibration, **fields: Any) -> dict[str, Any]:
    """Engine overrides for both sides of a check: `fields` plus the swap/recompute estimates
    the simulator would take from the cost model, so both engines decide alike."""
    cost = calibration.cost_model()
    return {"dtype": "float32", "host_link_bandwidth": calibration.host_link_bandwidth,
            "swap_latency": calibration.per_transfer_latency,
            "prefill_tokens_per_second": cost.prefill_tokens_per_second, **fields}


def percent_error(sim: float, real: float) -> float:
    return 100.0 * (sim - real) / real if real else float("nan")


def peak_active_calls(result: SimResult) -> int:
    """The most calls in the engine at once (added, not finished): above `max_num_seqs`,
    calls queued."""
    events = sorted([(t, 1) for t in result.call_start.values()]
                    + [(t, -1) for t in result.call_finish.values()])
    active = peak = 0
    for _, change in events:  # at a tie, a finish (-1) sorts before a start
        active += change
        peak = max(peak, active)
    return peak


def comparison(real: SimResult, sim: SimResult) -> dict[str, Any]:
    """Per-program completion times (finish - arrival), mean normalized latency and makespan
    of the two runs, with the simulator's error relative to the real engine."""
    by_id = {p.program_id: p for p in sim.programs}
    programs = []
    for r in sorted(real.programs, key=lambda p: p.arrival):
        s = by_id[r.program_id]
        programs.append({"program": r.program_id, "calls": r.num_calls,
                         "tokens": r.generated_tokens, "arrival": r.arrival,
                         "real_s": r.finish - r.arrival, "sim_s": s.finish - s.arrival,
                         "error_pct": percent_error(s.finish - s.arrival, r.finish - r.arrival)})
    mr, ms = compute_metrics(real.programs), compute_metrics(sim.programs)
    errors = [abs(p["error_pct"]) for p in programs]
    return {
        "policy": real.policy, "programs": programs,
        "mean_norm_latency": {"real": mr.mean_norm_latency, "sim": ms.mean_norm_latency,
                              "error_pct": percent_error(ms.mean_norm_latency,
                                                         mr.mean_norm_latency)},
        "makespan": {"real": mr.makespan_s, "sim": ms.makespan_s,
                     "error_pct": percent_error(ms.makespan_s, mr.makespan_s)},
        "mean_abs_program_error_pct": sum(errors) / len(errors),
        "max_abs_program_error_pct": max(errors),
        "steps": {"real": real.num_steps, "sim": sim.num_steps},
        "preemptions": {"real": real.num_preemptions, "sim": sim.num_preemptions},
        "peak_active_calls": {"real": peak_active_calls(real), "sim": peak_active_calls(sim)},
        "real_wall_s": real.wall_seconds,
    }


def format_comparison(c: dict[str, Any]) -> str:
    lines = [f"policy {c['policy']}: per-program completion time (finish - arrival, s)",
             f"  {'program':<14}{'calls':>6}{'tokens':>8}{'arrival':>9}{'real':>9}{'sim':>9}"
             f"{'error':>9}"]
    for p in c["programs"]:
        lines.append(f"  {p['program']:<14}{p['calls']:>6}{p['tokens']:>8}{p['arrival']:>9.2f}"
                     f"{p['real_s']:>9.2f}{p['sim_s']:>9.2f}{p['error_pct']:>+8.1f}%")
    m, k = c["mean_norm_latency"], c["makespan"]
    lines += [
        f"  mean |error| per program {c['mean_abs_program_error_pct']:.1f}%, "
        f"max {c['max_abs_program_error_pct']:.1f}%",
        f"  mean normalized latency (s/token): real {m['real']:.4f}  sim {m['sim']:.4f}  "
        f"error {m['error_pct']:+.1f}%",
        f"  makespan (s): real {k['real']:.2f}  sim {k['sim']:.2f}  error {k['error_pct']:+.1f}%",
        f"  steps real {c['steps']['real']} / sim {c['steps']['sim']}; preemptions real "
        f"{c['preemptions']['real']} / sim {c['preemptions']['sim']}; most calls in the engine "
        f"at once real {c['peak_active_calls']['real']} / sim {c['peak_active_calls']['sim']}",
    ]
    return "\n".join(lines)
