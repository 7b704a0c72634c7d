"""Replaying a trace on the real engine: `run_real` plays a trace on the real engine (real model,
real time) with the simulator's own driver (`bench.sim.simulate.Driver`) on a
`bench.support.wall_clock.WallClock`: idle time is skipped, busy time is real. It returns a
`SimResult` like `simulate`'s, so the two compare figure for figure.

`real_engine` builds an engine with its real ModelRunner whose executor is wrapped in a
`StepRecorder`: the counters the driver and `SimResult` read, and optionally each step's
executor wall time as a `bench.support.step_fit.StepSample` (what calibration probes record).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from engine.config import EngineConfig
from engine.executor import Executor, StepResult
from engine.llm_engine import LLMEngine
from scheduler.plan import SchedulePlan

from bench.sim.baselines import engine_config_for
from bench.sim.cost_model import chunk_shapes
from bench.sim.simulate import Driver, PromptMaker, SimResult, run_result
from bench.sim.trace import Trace
from bench.support.step_fit import StepSample
from bench.support.wall_clock import WallClock


class StepRecorder:
    """Wraps the engine's real executor with the counters the simulator's driver and results
    read (`num_steps`: non-empty plans; `num_tokens_computed`: tokens of every chunk run; swap
    transfers and seconds; busy seconds). With `record`, every step that runs chunks is kept
    in `samples` (its wall time is that of the executor: the model step, the swaps and
    sampling)."""

    def __init__(self, inner: Executor, record: bool = False) -> None:
        self.inner = inner
        self.record = record
        self.samples: list[StepSample] = []
        self.num_steps = 0
        self.num_tokens_computed = 0
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
        self.num_tokens_computed += plan.num_batched_tokens
        self.num_swap_transfers += bool(plan.swap_out) + bool(plan.swap_in)
        self.swap_seconds_total += result.swap_seconds
        if self.record and plan.chunks:
            self.samples.append(StepSample(tuple(chunk_shapes(plan.chunks)),
                                           not plan.is_continuation, seconds))
        return result


def real_engine(model_dir: str | Path, config: dict[str, Any],
                clock: Any = time.monotonic) -> tuple[LLMEngine, StepRecorder]:
    """An engine with its real ModelRunner, whose executor is wrapped in a `StepRecorder`."""
    engine = LLMEngine(EngineConfig.from_flat(model=str(model_dir), **config), clock=clock)
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
    return run_result(policy, "real", Path(model_dir).name, engine, recorder, driver,
                      end_time=clock(), wall_seconds=time.perf_counter() - wall_start,
                      num_kv_blocks=engine.kv.pool.num_blocks)
