"""N engine replicas on one virtual timeline, behind a placement policy (`scheduler.placement`).

Each replica is a real `LLMEngine` with its own `VirtualClock` and `SimulatedExecutor`, built
exactly as `simulate()` builds its one engine (same config, same policy on every replica). The
driver is `bench.sim.simulate.Driver`'s, discrete-event over replicas: one heap holds arrivals,
ready calls and cross-replica program ends in global time, and each round takes the earliest
of the next event and the busy replica (one with unfinished calls) with the smallest clock:

- an event at time t is handled once no busy replica is behind t (ties: the event first, as
  `simulate()` adds what is due before it steps); a replica that receives a call first jumps
  to t if it is behind (idle), so a call that arrives during a replica's step is added when
  that step ends, as on one engine;
- otherwise that replica steps: only its clock advances, and its finished calls release their
  children at its time (after their delay);
- a replica whose step ran nothing waits (its clock jumps to the next event handled), and
  with nothing else left to do the run is stuck (RuntimeError), as in `simulate()`.

Placement, per ready call: every replica reports a `ReplicaLoad` from its `engine.stats()`
(`replica_load`), the call is a `PlacementRequest` with its prompt's chained full-block hashes
(`prompt_block_hashes`, block size of the engines), and it is added to the replica `place`
picks. Each finished call is `observe`d with its usage (`CallOutcome`); `program_ended` when a
program's last call finishes. Loads are read between steps, so a replica whose step spans the
decision time reports the state after that step.

Programs: a replica `start_program`s a program the first time one of its calls lands there,
and the program is ended on every replica it used when its last call finishes: at once on
that call's replica, on the others by an event at that time (so each replica ends it at its
own time, never before). A program's finish is its last call's finish, on whichever replica.
The driver keeps the router's global accounting (`scheduler.program_fold.ProgramFold`,
the replicas' policy folding each finished call's service into its program) and sends each
call with its program's global service (`program_service`), as a router does: a program
that moves to another replica keeps its priority there. A replica expires a
program that idled there for `program_ttl` while its calls ran elsewhere; a later call there
opens it anew under a new id (`P~N`). The router, which keeps a program's id, starts it there
again only if the replica lets the id be reused, and otherwise bars that replica for the
program (`server/router/generate.py`): here the program keeps the replica (a difference only
for programs that leave a replica for longer than `program_ttl`, 600 s by default).

With one replica every placement picks it and the run is exactly `simulate()`'s (same call
times, same counters), given the programs' root calls have no delay (every generated
workload): a program is then started at the same time either way.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from engine.errors import UnknownProgramError
from engine.llm_engine import LLMEngine
from engine.stats import EngineStats
from kvcache.cache_events import CacheView
from kvcache.prefix_hash import hash_block
from scheduler.placement import (DEFAULT_CUTOFF, DEFAULT_PLACEMENT, CallOutcome, Placement,
                                 PlacementRequest, ReplicaLoad, make_placement)
from scheduler.policies import make_policy
from scheduler.process_table import CallRecord
from scheduler.program_fold import ProgramFold

from bench.sim.cost_model import CostModel
from bench.sim.quiet_collector import quiet_collector
from bench.sim.sim_executor import SimulatedExecutor, VirtualClock, is_speed
from bench.sim.simulate import (Driver, EarlyStop, PromptMaker, SimResult, _Program, sim_engine,
                                sim_engine_config)
from bench.sim.trace import Trace, TraceCall

# scheduler stats that are rates in use, not counters: averaged over replicas, not summed
_RATE_STATS = ("host_link_bandwidth", "prefill_tokens_per_second")


def replica_options(replicas: int = 1, placement: str | None = None,
                    cutoff: int | str = DEFAULT_CUTOFF,
                    placement_options: dict[str, Any] | None = None, kv_events: bool = False,
                    replica_speeds: Sequence[float] | None = None) -> dict[str, Any]:
    """The keywords that make `bench.analysis.sweep.run_point` (and the CLI) run `replicas` engines
    behind `placement` (default `DEFAULT_PLACEMENT`, with its `placement_options`) with
    `simulate_replicas` (and its `kv_events` and `replica_speeds` when set); empty for one
    engine without a placement named, which stays `simulate()`'s run."""
    if replicas == 1 and placement is None:
        if kv_events or replica_speeds:
            raise ValueError("kv_events and replica_speeds need replicas > 1 or a placement")
        return {}
    options = dict(replicas=replicas, placement=placement or DEFAULT_PLACEMENT, cutoff=cutoff)
    if placement_options:
        options["placement_options"] = dict(placement_options)
    if kv_events:
        options["kv_events"] = True
    if replica_speeds:
        options["replica_speeds"] = _speeds(replica_speeds, replicas)
    return options


def replica_load(replica: int, stats: EngineStats, healthy: bool = True,
                 cached: set[int] | None = None) -> ReplicaLoad:
    """What replica `replica` reports to placement from its EngineStats: running and queued
    tokens and calls (swapped-out calls count as waiting: they are queued), free device KV
    blocks counting cached (evictable) ones; `cached`, its prefix cache from its KV events
    (None: not reported)."""
    load = stats.load
    return ReplicaLoad(replica, healthy, load.running_tokens, load.waiting_tokens,
                       load.calls_running, load.calls_waiting + load.calls_swapped,
                       stats.kv_blocks_free + stats.kv_blocks_cached, stats.kv_blocks_total,
                       cached)


def prompt_block_hashes(token_ids: Sequence[int], block_size: int,
                        known: Sequence[int] = ()) -> tuple[int, ...]:
    """The chained `hash_block` hashes of the prompt's full blocks (the prefix cache's keys).
    `known`: the hashes of its first blocks, already computed (they are not checked)."""
    hashes = list(known)
    parent = hashes[-1] if hashes else None
    for start in range(len(hashes) * block_size, len(token_ids) - block_size + 1, block_size):
        parent = hash_block(parent, token_ids[start:start + block_size])
        hashes.append(parent)
    return tuple(hashes)


@dataclass(frozen=True)
class ReplicaFigures:
    """One replica's share of a run: calls placed there, their prompt tokens and the part its
    prefix cache served, the executor's busy seconds and steps, and its `load_tokens` as
    reported at the placement decisions (max and mean over all decisions)."""

    replica: int
    calls: int
    prompt_tokens: int
    cached_tokens: int
    busy_seconds: float
    num_steps: int
    max_load_tokens: int
    mean_load_tokens: float

    @property
    def cache_hit_rate(self) -> float:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    def to_dict(self) -> dict[str, float | int]:
        return {"replica": self.replica, "calls": self.calls,
                "prompt_tokens": self.prompt_tokens, "cached_tokens": self.cached_tokens,
                "cache_hit_rate": self.cache_hit_rate, "busy_seconds": self.busy_seconds,
                "num_steps": self.num_steps, "max_load_tokens": self.max_load_tokens,
                "mean_load_tokens": self.mean_load_tokens}


class _Replica:
    """One engine with its own clock and executor, and what the driver counts for it."""

    def __init__(self, index: int, engine: LLMEngine, clock: VirtualClock,
                 executor: SimulatedExecutor, kv_events: bool = False) -> None:
        self.index, self.engine, self.clock, self.executor = index, engine, clock, executor
        self.cache = CacheView() if kv_events else None  # its KV events, as a router reads
        self.stalled = False  # its last step ran nothing: it waits for the next event
        self.calls = self.prompt_tokens = self.cached_tokens = 0
        self.load_max = self.load_sum = 0

    def cached(self) -> set[int] | None:
        """Its prefix cache as its KV events say now (None: not reported); a router reads
        them with each load poll, the simulator at each decision (no poll lag)."""
        if self.cache is None:
            return None
        self.cache.apply(self.engine.cache_digest(self.cache.epoch, self.cache.next))
        return self.cache.hashes

    def figures(self, decisions: int) -> ReplicaFigures:
        return ReplicaFigures(self.index, self.calls, self.prompt_tokens, self.cached_tokens,
                              self.executor.busy_seconds, self.executor.num_steps,
                              self.load_max, self.load_sum / decisions if decisions else 0.0)


@dataclass(frozen=True)
class _EndOn:
    """An event: end the program on these (replica, engine program id) pairs."""

    replicas: tuple[tuple[int, str], ...]


class MultiDriver(Driver):
    """`Driver` over several replicas and a placement (see the module docstring). Per call,
    besides the Driver's records: the replica it ran on (`call_replica`)."""

    def __init__(self, replicas: Sequence[_Replica], cost: CostModel, prompts: PromptMaker,
                 placement: Placement, use_oracle: bool) -> None:
        super().__init__(replicas[0].engine, replicas[0].clock, cost, prompts, use_oracle)
        self.replicas = list(replicas)
        self.placement = placement
        self.block_size = replicas[0].engine.config.block_size
        self.engine_ids: dict[int, dict[int, str]] = {}  # program index -> replica -> id
        self.requests: dict[str, PlacementRequest] = {}  # running call -> its request
        self.call_replica: dict[str, int] = {}
        # program index -> its last prompt and that prompt's block hashes
        self.last_prompt: dict[int, tuple[list[int], tuple[int, ...]]] = {}
        self.last_replica: dict[int, int] = {}  # live program index -> its last call's replica
        self.decisions = 0
        self.moves = 0  # calls placed away from their program's previous call's replica
        # The router's global accounting (scheduler/program_fold.py): each call carries its
        # program's service folded over every replica, as a real router sends it.
        engine = replicas[0].engine
        self.global_programs = ProgramFold(engine.config.scheduler,
                                           make_policy(engine.config.policy))
        self.global_calls: dict[str, CallRecord] = {}

    def run(self, trace: Trace, stop: EarlyStop | None = None) -> None:
        self._set_stop(trace, stop)
        for index, program in enumerate(trace.programs):
            self._push(program.arrival, _Program(index, program), None)
        events, replicas = self.events, self.replicas
        while True:
            busy: _Replica | None = None
            for replica in replicas:
                if not replica.stalled and replica.engine.has_unfinished_calls() and (
                        busy is None or replica.clock.now < busy.clock.now):
                    busy = replica
            now = min(events[0][0] if events else math.inf,  # this round's time: its
                      busy.clock.now if busy else math.inf)  # event's or its replica's
            if now < math.inf and self._stop_due(now):
                return
            if events and (busy is None or events[0][0] <= busy.clock.now):
                t, _, program, item = heapq.heappop(events)
                for replica in replicas:
                    if replica.stalled:
                        replica.clock.jump_to(t)
                        replica.stalled = False
                if item is None:
                    self._open(program)
                elif isinstance(item, _EndOn):
                    for index, engine_id in item.replicas:
                        replicas[index].clock.jump_to(t)
                        if _is_open(replicas[index].engine, engine_id):
                            replicas[index].engine.end_program(engine_id)
                else:
                    self._place(t, program, item)
            elif busy is not None:
                busy.stalled = not self._step(busy.engine, busy.clock)
            elif any(replica.stalled for replica in replicas):
                now = max(replica.clock.now for replica in replicas)
                raise RuntimeError(f"simulation stuck at t={now:.3f}: calls wait but nothing "
                                   "can run")
            else:
                return

    def _open(self, program: _Program) -> None:
        """Start the program's global record (at its arrival, this event's time), then set up
        its calls as `Driver._open` does."""
        trace = program.trace
        self.global_programs.start(trace.arrival, trace.program_id, None, trace.workload)
        super()._open(program)

    def _place(self, t: float, program: _Program, call: TraceCall) -> None:
        key = f"{program.trace.program_id}/{call.call_id}"
        prompt = self.prompts.prompt(program.index, call, program.trace)
        loads = [replica_load(r.index, r.engine.stats(), cached=r.cached())
                 for r in self.replicas]
        request = PlacementRequest(program.trace.program_id, len(prompt),
                                   self._block_hashes(program.index, prompt),
                                   self.block_size)
        index = self.placement.place(request, loads)
        if not (isinstance(index, int) and 0 <= index < len(self.replicas)):
            raise ValueError(f"placement {self.placement.name or type(self.placement).__name__}"
                             f" returned replica {index!r}, not one of 0..{len(loads) - 1}")
        self.decisions += 1
        previous = self.last_replica.get(program.index)
        if previous is not None and previous != index:
            self.moves += 1
        self.last_replica[program.index] = index
        for replica, load in zip(self.replicas, loads):
            replica.load_max = max(replica.load_max, load.load_tokens)
            replica.load_sum += load.load_tokens
        replica = self.replicas[index]
        replica.clock.jump_to(t)
        engine_ids = self.engine_ids.setdefault(program.index, {})
        engine_id = engine_ids.get(index)
        if engine_id is None or not _is_open(replica.engine, engine_id):
            # Opened anew where it idled past program_ttl while its calls ran elsewhere: the
            # replica keeps the expired id, so this one is new (and deterministic).
            name = program.trace.program_id if engine_id is None else \
                f"{program.trace.program_id}~{self.decisions}"
            engine_id = engine_ids[index] = replica.engine.start_program(
                name, oracle_work=self._oracle_work(program),
                program_class=program.trace.workload)
        record, service = self.global_programs.begin_call(t, program.trace.program_id, key,
                                                          None, len(prompt))
        self.global_calls[key] = record
        replica.engine.add_call(engine_id, prompt, self._params(call.output_len), call_id=key,
                                program_service=service)
        replica.calls += 1
        self.by_call_id[key] = (program, call)
        self.requests[key] = request
        self.call_replica[key] = index
        self.call_start[key] = replica.clock.now

    def _block_hashes(self, program: int, prompt: list[int]) -> tuple[int, ...]:
        """The prompt's block hashes, reusing those of the program's last prompt when that
        one's hashed blocks are a prefix of this one (a program's prompts extend each other:
        its history), so each program hashes about each of its blocks once."""
        known: tuple[int, ...] = ()
        last = self.last_prompt.get(program)
        if last is not None:
            tokens, hashes = last
            n = min(len(hashes), len(prompt) // self.block_size) * self.block_size
            if prompt[:n] == tokens[:n]:
                known = hashes[:n // self.block_size]
        hashes = prompt_block_hashes(prompt, self.block_size, known)
        self.last_prompt[program] = (prompt, hashes)
        return hashes

    def _finished(self, call_id: str) -> None:
        index = self.call_replica[call_id]
        replica = self.replicas[index]
        completion = replica.engine.pop_completion(call_id)
        prompt_tokens = len(completion.prompt_token_ids)
        replica.prompt_tokens += prompt_tokens
        replica.cached_tokens += completion.num_cached_tokens
        request = self.requests.pop(call_id)
        self.placement.observe(request, CallOutcome(index, prompt_tokens,
                                                    completion.num_cached_tokens,
                                                    completion.queue_seconds,
                                                    replica.engine.num_running))
        program = self.by_call_id[call_id][0]
        now = replica.clock.now
        self.global_programs.finish_call(now, self.global_calls.pop(call_id),
                                         completion.service_seconds, completion.queue_seconds,
                                         len(completion.token_ids))
        if self._completed(call_id, len(completion.token_ids), now):
            self.global_programs.end(now, program.trace.program_id)
            engine_ids = self.engine_ids.pop(program.index)
            self.last_prompt.pop(program.index, None)
            self.last_replica.pop(program.index, None)
            replica.engine.end_program(engine_ids.pop(index))
            if engine_ids:
                heapq.heappush(self.events, (now, next(self.seq), program,
                                             _EndOn(tuple(engine_ids.items()))))
            self.placement.program_ended(program.trace.program_id)
        del self.by_call_id[call_id]


def _is_open(engine: LLMEngine, program_id: str) -> bool:
    """Whether `engine` still has the program open (a replica expires a program idle there
    for `program_ttl`, as a real one does)."""
    try:
        engine.get_program(program_id)
    except UnknownProgramError:
        return False
    return True


def simulate_replicas(trace: Trace, policy: str, replicas: int = 2,
                      placement: str | Placement = "cutoff", preset: str = "a100-80g",
                      model: str = "llama-3.1-8b",
                      engine_overrides: dict[str, Any] | None = None,
                      cutoff: int | str = DEFAULT_CUTOFF, cost_model: CostModel | None = None,
                      placement_options: dict[str, Any] | None = None,
                      stop: EarlyStop | None = None, kv_events: bool = False,
                      replica_speeds: Sequence[float] | None = None) -> SimResult:
    """Run `trace` on `replicas` engines under the baseline `policy` (each engine configured
    as `simulate()` configures its one) behind `placement`: a policy name
    (`scheduler.placement.make_placement(name, cutoff=cutoff, **placement_options)`) or a
    fresh `Placement` instance (then `cutoff` and `placement_options` are unused). The
    adaptive cutoff (`cutoff`, cutoff "auto") gets the cost model's prefill rate unless
    `placement_options` give one.

    The result is a `SimResult` like `simulate()`'s: the driver's per-call and per-program
    records; counters summed over replicas (steps, tokens, preemptions, swaps, busy seconds,
    KV blocks, scheduler stats except its rates, which are averaged); `end_time` the latest
    replica clock. `extra` holds `replicas`, `placement`, `cache_hit_rate` (prompt tokens
    the prefix caches served over all prompt tokens, from the calls' usage), `prompt_tokens`,
    `cached_tokens`, `placements` (calls placed), `program_moves` (calls placed on another
    replica than their program's previous call) and `per_replica` (`ReplicaFigures.to_dict()`
    each). Raises like
    `simulate()` (ValueError for bad arguments, RuntimeError when stuck, integrity errors).
    `stop`: end early, as `simulate()` does (`bench.sim.simulate.EarlyStop`). `kv_events`: the
    replicas report their prefix caches (`kvcache.cache_events`), which placement then uses
    instead of guessing from what it sent. `replica_speeds`: one relative speed per replica
    (`SimulatedExecutor.speed`: 0.5 is a replica whose steps take twice as long; its engine
    is not told), default all 1."""
    wall_start = time.perf_counter()
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
        raise ValueError(f"replicas: must be an int >= 1, got {replicas!r}")
    cost = cost_model or CostModel.from_names(preset, model)
    speeds = _speeds(replica_speeds, replicas)
    config = sim_engine_config(trace, policy, cost, engine_overrides)
    if isinstance(placement, str):
        options = dict(placement_options or {})
        if placement == "cutoff" and cutoff == "auto":  # the adaptive cutoff's prefill rate
            options.setdefault("prefill_tokens_per_second", cost.prefill_tokens_per_second)
        placement = make_placement(placement, cutoff, **options)
    elif not isinstance(placement, Placement):
        raise ValueError(f"placement: must be a name or a Placement, got {placement!r}")
    prompts = PromptMaker(cost.model.vocab)
    pool: list[_Replica] = []
    for index in range(replicas):
        clock = VirtualClock()
        engine, executor = sim_engine(config, cost, clock, prompts, speeds[index])
        pool.append(_Replica(index, engine, clock, executor, kv_events))
    driver = MultiDriver(pool, cost, prompts, placement,
                         use_oracle=config["policy"] == "oracle")
    with quiet_collector():
        driver.run(trace, stop)
    for replica in pool:
        replica.engine.check_integrity()
    return _result(policy, cost, pool, driver, placement, config["num_kv_blocks"],
                   time.perf_counter() - wall_start)


def _speeds(replica_speeds: Sequence[float] | None, replicas: int) -> tuple[float, ...]:
    """One speed per replica (all 1 when none given); ValueError naming a bad list."""
    if replica_speeds is None:
        return (1.0,) * replicas
    speeds = tuple(replica_speeds)
    if len(speeds) != replicas or not all(map(is_speed, speeds)):
        raise ValueError(f"replica_speeds: need {replicas} numbers > 0, got {replica_speeds!r}")
    return speeds


def _result(policy: str, cost: CostModel, pool: Sequence[_Replica], driver: MultiDriver,
            placement: Placement, num_kv_blocks: int, wall_seconds: float) -> SimResult:
    per_stats = [replica.engine.scheduler.stats() for replica in pool]
    stats: dict[str, int | float] = {}
    for name in per_stats[0]:
        total = sum(s[name] for s in per_stats)
        stats[name] = total / len(per_stats) if name in _RATE_STATS else total
    figures = [replica.figures(driver.decisions) for replica in pool]
    prompt_tokens = sum(f.prompt_tokens for f in figures)
    cached_tokens = sum(f.cached_tokens for f in figures)
    executors = [replica.executor for replica in pool]
    return SimResult(
        policy=policy, preset=cost.gpu.name, model=cost.model.name, programs=driver.results,
        call_finish=driver.call_finish, call_start=driver.call_start,
        call_first_token=driver.call_first_token, token_gaps=driver.token_gaps,
        num_steps=sum(e.num_steps for e in executors),
        num_tokens_computed=sum(e.num_tokens_computed for e in executors),
        num_rounds=int(stats["num_rounds"]), num_preemptions=int(stats["num_preemptions"]),
        num_swap_outs=int(stats["preemptions_swap"]),
        num_swap_transfers=sum(e.num_swap_transfers for e in executors),
        swap_seconds=sum(e.swap_seconds_total for e in executors),
        busy_seconds=sum(e.busy_seconds for e in executors),
        end_time=max(replica.clock.now for replica in pool), wall_seconds=wall_seconds,
        num_kv_blocks=num_kv_blocks * len(pool), scheduler_stats=stats,
        extra={"replicas": len(pool),
               "placement": placement.name or type(placement).__name__,
               "cache_hit_rate": cached_tokens / prompt_tokens if prompt_tokens else 0.0,
               "prompt_tokens": prompt_tokens, "cached_tokens": cached_tokens,
               "program_moves": driver.moves, "placements": driver.decisions,
               "per_replica": [f.to_dict() for f in figures]})
