"""Replay a trace through the real engine with the simulated executor, in virtual time.

The engine, scheduler, KV cache manager, swap accounting and multistep are the real code; only
the executor is simulated (`bench.sim.sim_executor`), so a schedule found here is one the engine
would make. The driver owns the programs: a program starts at its arrival, a call is added once all
its parents have finished and its `delay` has passed since the last of them (a root call: since
the program's arrival), and the program ends when its last call finishes. Each program is
labelled with its workload as its `program_class` (what an agent framework can say of its
programs; only the `gittins` policy uses it). When the engine has nothing to run the clock
jumps to the next event instead of stepping. Per call it records when the call was added,
when `engine.step()` returned its first token (the call's time to first token is the
difference), the gaps between its later tokens (`bench.sim.token_gaps`) and when it finished.

A run may stop early (`EarlyStop`): once a given set of programs has finished, once the clock
passes a deadline, or when a watcher of the backlog says so. Up to that point it is the same
run as without the stop, step for step, so every program finished by then has exactly the
times it would have had.
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
import zlib
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from engine.config import EngineConfig
from engine.llm_engine import LLMEngine
from engine.loader import ModelInfo
from engine.sampling_params import SamplingParams
from scheduler.config import SchedulerConfig

from bench.sim.baselines import BLOCK_SIZE, engine_config_for
from bench.sim.client_programs import ClientPrograms
from bench.sim.cost_model import CostModel
from bench.sim.metrics import percentile
from bench.sim.quiet_collector import quiet_collector
from bench.sim.sim_executor import SimulatedExecutor, VirtualClock
from bench.sim.token_gaps import TokenGaps
from bench.sim.trace import Trace, TraceCall, TraceProgram

_FIRST_TOKEN = 100  # made-up prompt ids start here (clear of special tokens)


@dataclass(frozen=True)
class ProgramResult:
    """One program's outcome; times are virtual seconds. `finish` is when its last call
    finished (for a parallel program, the end of its critical path)."""

    program_id: str
    workload: str
    arrival: float
    finish: float
    generated_tokens: int
    num_calls: int


@dataclass
class SimResult:
    """A finished run. Call keys are "program/call"; times are the run's clock (virtual
    seconds in the simulator). `scheduler_stats` is the scheduler's `stats()` at the end.
    `extra`: what a multi-replica run adds (`bench.sim.multi_sim`: placement, cache hit rate,
    per-replica figures), or an inferred-programs run (`inferred_programs`: its counts, see
    `bench.sim.client_programs`); else empty."""

    policy: str
    preset: str
    model: str
    programs: list[ProgramResult]
    call_finish: dict[str, float] = field(default_factory=dict)
    call_start: dict[str, float] = field(default_factory=dict)  # when it was added
    call_first_token: dict[str, float] = field(default_factory=dict)  # its first token back
    token_gaps: TokenGaps = field(default_factory=TokenGaps)  # between a call's tokens
    num_steps: int = 0
    num_tokens_computed: int = 0  # prefill + decode tokens the executor ran
    num_rounds: int = 0
    num_preemptions: int = 0
    num_swap_outs: int = 0
    num_swap_transfers: int = 0
    swap_seconds: float = 0.0
    busy_seconds: float = 0.0
    end_time: float = 0.0
    wall_seconds: float = 0.0
    num_kv_blocks: int = 0
    scheduler_stats: dict[str, int | float] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def finish_order(self) -> list[str]:
        """Program ids by finish time (ties by id)."""
        return [p.program_id for p in sorted(self.programs, key=lambda p: (p.finish, p.program_id))]

    @property
    def ttfts(self) -> list[float]:
        """Each call's time to first token (first token back minus added), in the order the
        first tokens came back."""
        return [t - self.call_start[key] for key, t in self.call_first_token.items()]

    def ttft_percentile(self, q: float, programs: Collection[str] | None = None) -> float:
        """The q-th percentile (0..100) of `ttfts`, or of those of the calls of `programs`
        (program ids; a call key's program is the part before its first "/"); 0 without a
        call."""
        ttfts = self.ttfts if programs is None else [
            self.call_first_token[key] - self.call_start[key]
            for key in _calls_of(self.call_first_token, programs)]
        return percentile(ttfts, q) if ttfts else 0.0

    def itl_percentile(self, q: float, programs: Collection[str] | None = None) -> float:
        """The q-th percentile (0..100) of the inter-token gaps of every call, or of the calls
        of `programs` (`TokenGaps.percentile`: to within 1%, never below); 0 without a gap."""
        calls = None if programs is None else _calls_of(self.token_gaps.bins, programs)
        return self.token_gaps.percentile(q, calls)

    @property
    def prefill_tokens_computed(self) -> int:
        """Tokens computed other than decode inputs: prompts (less prefix-cache hits) and the
        KV recomputed after a drop. A finished call of n tokens ran n - 1 decode inputs (its
        first token comes from its prefill; the last token a recompute prefills is the decode
        input it replaces)."""
        generated = sum(p.generated_tokens for p in self.programs)
        return self.num_tokens_computed - (generated - len(self.call_finish))


def _calls_of(keys: Iterable[str], programs: Collection[str]) -> list[str]:
    """The call keys ("program/call") of `programs`, in the order of `keys`."""
    return [key for key in keys if key.partition("/")[0] in programs]


class PromptMaker:
    """Made-up prompt ids: each program has its own token stream (one per `segment` of it) and
    a call's prompt is the stream's first `prompt_len` ids, so calls of one program share
    prefixes (as agent history does) while different programs share none, except a program's
    shared prefix: its first `prefix_len` ids come from the stream of its `prefix_key`, the
    same for every program with that key (a shared system prompt). `next_token` continues a stream, so the tokens a call
    generates are the ones its program's next prompt repeats (its history)."""

    def __init__(self, vocab: int) -> None:
        self.span = min(vocab - _FIRST_TOKEN, 100_000)
        self._ring = list(range(_FIRST_TOKEN, _FIRST_TOKEN + self.span)) * 2

    def prompt(self, program_index: int, call: TraceCall,
               program: TraceProgram | None = None) -> list[int]:
        if call.prompt_token_ids is not None:
            return list(call.prompt_token_ids)
        start = (program_index * 7919) if not call.segment else \
            zlib.crc32(f"{program_index}/{call.segment}".encode())
        ids = self._stream(start % self.span, call.prompt_len)
        if program is not None and program.prefix_key:
            key_offset = zlib.crc32(program.prefix_key.encode()) % self.span
            ids[:program.prefix_len] = self._stream(key_offset, program.prefix_len)
        return ids

    def next_token(self, token_ids: Sequence[int]) -> int:
        """The id that follows the last of `token_ids` in its stream (made-up ids are
        consecutive, wrapping inside the span)."""
        return _FIRST_TOKEN + (token_ids[-1] - _FIRST_TOKEN + 1) % self.span

    def _stream(self, offset: int, length: int) -> list[int]:
        if length <= self.span:
            return self._ring[offset:offset + length]
        return [_FIRST_TOKEN + (offset + i) % self.span for i in range(length)]


@dataclass(frozen=True)
class EarlyStop:
    """When a run may end before every program has finished: as soon as every program in
    `programs` (ids) has finished and the clock has reached `not_before` (virtual seconds),
    as soon as the clock has passed `deadline`, or as soon as `watch(now, in_system)` returns
    True, whichever comes first. The driver calls `watch` before each round (an event handled
    or a step run, the round that stops included) with the time and the number of programs
    started and not finished. Calls still in flight at the stop are left where they are:
    their programs are not in the result, and the run's counters (steps, tokens,
    preemptions) cover the run up to the stop."""

    programs: frozenset[str]
    deadline: float = math.inf
    watch: Callable[[float, int], bool] | None = None
    not_before: float = 0.0

    def __post_init__(self) -> None:
        if not self.programs:
            raise ValueError("programs: must not be empty")
        if math.isnan(self.deadline):
            raise ValueError("deadline: must be a number")
        if math.isnan(self.not_before):
            raise ValueError("not_before: must be a number")


@dataclass
class _Program:
    index: int
    trace: TraceProgram
    engine_id: str = ""
    pending_parents: dict[str, int] = field(default_factory=dict)
    children: dict[str, list[TraceCall]] = field(default_factory=dict)
    calls_left: int = 0
    generated: int = 0


def simulate(trace: Trace, policy: str, preset: str = "a100-80g", model: str = "llama-3.1-8b",
             engine_overrides: dict[str, Any] | None = None,
             cost_model: CostModel | None = None, stop: EarlyStop | None = None,
             program_ids: str = "explicit") -> SimResult:
    """Run `trace` under the named baseline `policy` (`bench.sim.baselines`; a bare scheduler policy
    name also works) on `model` x `preset`, or on an explicit `cost_model` (tests), to the end
    or to `stop`. `program_ids` is how calls get their programs (`bench.sim.client_programs`:
    the trace's own, inferred from the prompts, or none; an inferred run's counts are the
    result's `extra["inferred_programs"]`). Raises ValueError if `stop` names a program not in
    `trace` or the oracle is to run without explicit ids, RuntimeError if the engine gets
    stuck, and KVCacheIntegrityError-like errors if the engine is not clean at the end."""
    wall_start = time.perf_counter()
    cost = cost_model or CostModel.from_names(preset, model)
    config = sim_engine_config(trace, policy, cost, engine_overrides)
    use_oracle = config["policy"] == "oracle"
    if use_oracle and program_ids != "explicit":
        raise ValueError("program_ids: the oracle knows each program's work in advance, so "
                         "it needs explicit ids")
    clock = VirtualClock()
    prompts = PromptMaker(cost.model.vocab)
    engine, executor = sim_engine(config, cost, clock, prompts)
    client = (None if program_ids == "explicit"
              else ClientPrograms(program_ids, engine.config.scheduler.program_ttl))
    driver = Driver(engine, clock, cost, prompts, use_oracle=use_oracle, client=client)
    with quiet_collector():
        driver.run(trace, stop)
    engine.check_integrity()
    result = run_result(policy, cost.gpu.name, cost.model.name, engine, executor, driver,
                        end_time=clock(), wall_seconds=time.perf_counter() - wall_start,
                        num_kv_blocks=config["num_kv_blocks"])
    if client is not None and client.summary() is not None:
        result.extra["inferred_programs"] = client.summary()
    return result


def sim_engine_config(trace: Trace, policy: str, cost: CostModel,
                      engine_overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """The EngineConfig fields of a simulated engine under the baseline `policy`: memory and
    transfer rates from `cost`, process-table bounds that the trace cannot reach (a replica
    may hold any number of the trace's programs; the simulator measures scheduling, not
    admission control), then `engine_overrides` (ValueError for a bad name)."""
    block_size = (engine_overrides or {}).get("block_size", BLOCK_SIZE)
    programs = max(SchedulerConfig.max_programs, len(trace.programs))
    fields: dict[str, Any] = dict(
        num_kv_blocks=cost.kv_blocks(block_size), num_host_blocks=cost.host_blocks(block_size),
        host_link_bandwidth=cost.gpu.host_link_bandwidth * cost.model.tensor_parallel,
        swap_latency=cost.gpu.per_transfer_latency,
        prefill_tokens_per_second=cost.prefill_tokens_per_second,
        max_programs=programs, max_programs_per_tenant=programs)
    config = engine_config_for(policy, engine_overrides, **fields)
    if not config["enable_chunked_prefill"]:
        # vLLM without chunked prefill batches up to the longest prompt in one step.
        longest = max((c.prompt_len for p in trace.programs for c in p.calls), default=1)
        config["max_num_batched_tokens"] = max(config["max_num_batched_tokens"], longest)
    return config


def sim_engine(config: dict[str, Any], cost: CostModel, clock: VirtualClock,
               prompts: PromptMaker, speed: float = 1.0) -> tuple[LLMEngine, SimulatedExecutor]:
    """A real LLMEngine on `clock` with a SimulatedExecutor of `cost` at `speed` (sampled
    tokens continue `prompts`' streams). The model is the preset's shape, without a directory
    or a tokenizer (the prompts are token ids)."""
    executor = SimulatedExecutor(cost, clock, config["block_size"], prompts.next_token, speed)
    engine = LLMEngine(EngineConfig.from_flat(model=cost.model.name, **config),
                       executor=executor, clock=clock,
                       model=ModelInfo.from_hf_config(cost.model.hf_config()))
    return engine, executor


class ExecutorCounters(Protocol):
    """What a run's result reads from its executor (`SimulatedExecutor`, or the real one
    wrapped in `bench.support.real_run.StepRecorder`)."""

    num_steps: int
    num_tokens_computed: int
    num_swap_transfers: int
    swap_seconds_total: float
    busy_seconds: float


def run_result(policy: str, preset: str, model: str, engine: LLMEngine,
               executor: ExecutorCounters, driver: Driver, end_time: float, wall_seconds: float,
               num_kv_blocks: int) -> SimResult:
    """The `SimResult` of a finished run: the driver's records, the executor's counters and
    the scheduler's `stats()`."""
    stats = engine.scheduler.stats()
    return SimResult(
        policy=policy, preset=preset, model=model, programs=driver.results,
        call_finish=driver.call_finish, call_start=driver.call_start,
        call_first_token=driver.call_first_token, token_gaps=driver.token_gaps,
        num_steps=executor.num_steps,
        num_tokens_computed=executor.num_tokens_computed, num_rounds=int(stats["num_rounds"]),
        num_preemptions=int(stats["num_preemptions"]),
        num_swap_outs=int(stats["preemptions_swap"]),
        num_swap_transfers=executor.num_swap_transfers, swap_seconds=executor.swap_seconds_total,
        busy_seconds=executor.busy_seconds, end_time=end_time, wall_seconds=wall_seconds,
        num_kv_blocks=num_kv_blocks, scheduler_stats=dict(stats))


class Driver:
    """The event loop: arrivals and ready calls in a heap keyed by virtual time; per call the
    time it was added (`call_start`), its first token came back (`call_first_token`) and it
    finished (`call_finish`), and the gaps between its tokens (`token_gaps`). With an
    `EarlyStop` the loop checks it before each round (an event handled or a step run) and
    returns once it is due. Each trace program is an engine program, started at its arrival
    and ended with its last call, unless `client` gives each call its program instead."""

    def __init__(self, engine: LLMEngine, clock: VirtualClock, cost: CostModel,
                 prompts: PromptMaker, use_oracle: bool,
                 client: ClientPrograms | None = None) -> None:
        self.engine, self.clock, self.cost, self.prompts = engine, clock, cost, prompts
        self.use_oracle = use_oracle
        self.client = client
        self.events: list[tuple[float, int, _Program, TraceCall | None]] = []
        self.seq = itertools.count()
        self.by_call_id: dict[str, tuple[_Program, TraceCall]] = {}
        self.results: list[ProgramResult] = []
        self.call_finish: dict[str, float] = {}
        self.call_start: dict[str, float] = {}
        self.call_first_token: dict[str, float] = {}
        self.token_gaps = TokenGaps()
        self.params: dict[int, SamplingParams] = {}
        self.stop: EarlyStop | None = None
        self.stop_waits_for: set[str] = set()  # programs of `stop` not finished yet
        self.in_system = 0  # programs opened and not finished

    def run(self, trace: Trace, stop: EarlyStop | None = None) -> None:
        self._set_stop(trace, stop)
        for index, program in enumerate(trace.programs):
            self._push(program.arrival, _Program(index, program), None)
        engine, clock, events = self.engine, self.clock, self.events
        while True:
            if self._stop_due(clock.now):
                return
            while events and events[0][0] <= clock.now:
                _, _, program, call = heapq.heappop(events)
                if call is None:
                    self._start(program)
                else:
                    self._add(program, call)
            if engine.has_unfinished_calls():
                if not self._step(engine, clock):  # nothing could run
                    if not events:
                        raise RuntimeError(f"simulation stuck at t={clock.now:.3f}: calls wait "
                                           "but nothing can run")
                    clock.jump_to(events[0][0])
            elif events:
                clock.jump_to(events[0][0])
            else:
                return

    def _set_stop(self, trace: Trace, stop: EarlyStop | None) -> None:
        """Arm `stop` for this run (ValueError if it names a program not in `trace`)."""
        if stop is not None:
            unknown = stop.programs - {p.program_id for p in trace.programs}
            if unknown:
                raise ValueError(f"stop: programs not in the trace: {sorted(unknown)[:5]}")
        self.stop = stop
        self.stop_waits_for = set(stop.programs) if stop is not None else set()

    def _stop_due(self, now: float) -> bool:
        """A stop is armed and due at `now`: its watcher says so (asked first, every round),
        `now` is past its deadline, or its programs have all finished and `now` has reached
        its `not_before`."""
        stop = self.stop
        return stop is not None and (
            (stop.watch is not None and stop.watch(now, self.in_system))
            or now > stop.deadline
            or (not self.stop_waits_for and now >= stop.not_before))

    def _step(self, engine: LLMEngine, clock: VirtualClock) -> bool:
        """One `engine.step()`: record first tokens and token gaps, hand finished calls to
        `_finished`. False when nothing could run (the executor ran no step)."""
        steps_before = engine.executor.num_steps
        outputs = engine.step()
        now, gaps = clock.now, self.token_gaps
        for call_id in gaps.tokens([out.call_id for out in outputs if out.new_token_ids], now):
            self.call_first_token[call_id] = now
        for out in outputs:
            if out.finished:
                gaps.finished(out.call_id)
                self._finished(out.call_id)
        return engine.executor.num_steps != steps_before

    def _push(self, t: float, program: _Program, call: TraceCall | None) -> None:
        heapq.heappush(self.events, (t, next(self.seq), program, call))

    def _start(self, program: _Program) -> None:
        if self.client is None:
            program.engine_id = self.engine.start_program(
                program.trace.program_id, oracle_work=self._oracle_work(program),
                program_class=program.trace.workload)
        self._open(program)

    def _oracle_work(self, program: _Program) -> float | None:
        """The program's total service, for the oracle policy only."""
        if not self.use_oracle:
            return None
        return sum(self.cost.call_seconds(c.prompt_len, c.output_len)
                   for c in program.trace.calls)

    def _open(self, program: _Program) -> None:
        """Set up the program's call DAG and push its root calls (after their delay since
        the program's arrival)."""
        calls = program.trace.calls
        program.calls_left = len(calls)
        self.in_system += 1
        for call in calls:
            program.pending_parents[call.call_id] = len(call.parents)
            for parent in call.parents:
                program.children.setdefault(parent, []).append(call)
            if not call.parents:
                self._push(program.trace.arrival + call.delay, program, call)

    def _params(self, output_len: int) -> SamplingParams:
        params = self.params.get(output_len)
        if params is None:
            params = self.params[output_len] = SamplingParams(max_tokens=output_len,
                                                              ignore_eos=True)
        return params

    def _add(self, program: _Program, call: TraceCall) -> None:
        key = f"{program.trace.program_id}/{call.call_id}"
        prompt = self.prompts.prompt(program.index, call, program.trace)
        program_id = program.engine_id if self.client is None else self.client.program_of(
            self.engine, program.index, program.trace, call, prompt, self.clock.now)
        self.engine.add_call(program_id, prompt, self._params(call.output_len), call_id=key)
        self.by_call_id[key] = (program, call)
        self.call_start[key] = self.clock.now

    def _finished(self, call_id: str) -> None:
        completion = self.engine.pop_completion(call_id)
        if not self._completed(call_id, len(completion.token_ids), self.clock.now):
            del self.by_call_id[call_id]
        elif self.client is None:
            self.engine.end_program(self.by_call_id.pop(call_id)[0].engine_id)
        else:  # its programs end by TTL
            self.client.finished(self.by_call_id.pop(call_id)[0].index)

    def _completed(self, call_id: str, generated: int, now: float) -> bool:
        """Record a call that finished at `now` with `generated` tokens: push the children
        it was the last parent of (after their delay); True when it was its program's last
        call (the program's result is recorded; ending it on the engine is the caller's)."""
        program, call = self.by_call_id[call_id]
        self.call_finish[call_id] = now
        program.generated += generated
        program.calls_left -= 1
        for child in program.children.get(call.call_id, ()):
            program.pending_parents[child.call_id] -= 1
            if program.pending_parents[child.call_id] == 0:
                self._push(now + child.delay, program, child)
        if program.calls_left:
            return False
        trace = program.trace
        self.results.append(ProgramResult(trace.program_id, trace.workload, trace.arrival,
                                          now, program.generated, len(trace.calls)))
        self.stop_waits_for.discard(trace.program_id)
        self.in_system -= 1
        return True
