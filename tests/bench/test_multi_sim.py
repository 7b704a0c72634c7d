import dataclasses
import json

import pytest

from bench import cli
from bench.analysis import capacity as cap_mod
from bench.sim.cost_model import CostModel
from bench.sim.multi_sim import prompt_block_hashes, replica_options, simulate_replicas
from bench.sim.simulate import PromptMaker, simulate
from bench.sim.trace import Trace
from bench.sim.workloads import lats, mixed
from engine.llm_engine import LLMEngine
from kvcache.prefix_hash import hash_block
from scheduler.placement import PLACEMENTS, Placement, make_placement
from test_simulate import UnitStepCost, crafted_trace, make_call, make_program


class LocalRoundRobin(Placement):
    """Replicas in turn, whatever their load (test-local, on the bare interface)."""

    name = "local_rr"

    def __init__(self) -> None:
        self.count = 0

    def place(self, call, loads):
        self.count += 1
        return loads[(self.count - 1) % len(loads)].replica


class Recording(Placement):
    """Wraps a policy and records what it is asked and told."""

    def __init__(self, inner: Placement) -> None:
        self.inner, self.name = inner, inner.name
        self.decisions, self.outcomes, self.ended = [], [], []

    def place(self, call, loads):
        replica = self.inner.place(call, loads)
        self.decisions.append((call, replica, list(loads)))
        return replica

    def observe(self, call, outcome):
        self.outcomes.append((call, outcome))
        self.inner.observe(call, outcome)

    def program_ended(self, program_id):
        self.ended.append(program_id)
        self.inner.program_ended(program_id)


def unit_run(trace, replicas, placement, policy="vllm", **overrides):
    return simulate_replicas(trace, policy, replicas, placement, cost_model=UnitStepCost(),
                             engine_overrides=overrides or None)


def same_run(single, multi):
    """Every SimResult field equal but the wall time and the multi-replica extras."""
    a, b = dataclasses.asdict(single), dataclasses.asdict(multi)
    for key in ("wall_seconds", "extra"):
        a.pop(key), b.pop(key)
    return a == b


def call_replicas(result, placement):
    """call key -> the replica it was placed on (decisions are made in the order calls are
    added, which is `call_start`'s order)."""
    return {key: replica for key, (_, replica, _) in zip(result.call_start, placement.decisions)}


# ----- one replica is the single-engine run -----------------------------------------------
def scripted_traces():
    dag = make_program("P", 0.0, make_call("c0", output_len=2, delay=1.0),
                       make_call("c1", output_len=1, parents=["c0"], delay=2.5),
                       make_call("c2", output_len=1, parents=["c0"]),
                       make_call("c3", output_len=2, parents=["c1", "c2"]))
    idle = (make_program("A", 0.0, make_call("c", output_len=2)),
            make_program("B", 10.25, make_call("c", output_len=2)))
    return [crafted_trace(), Trace((dag,)), Trace(idle)]


@pytest.mark.parametrize("policy", ["vllm", "atlas"])
def test_one_replica_is_exactly_the_single_engine_run_on_scripted_traces(policy):
    for trace in scripted_traces():
        single = simulate(trace, policy, cost_model=UnitStepCost(),
                          engine_overrides={"max_num_seqs": 1})
        multi = simulate_replicas(trace, policy, 1, LocalRoundRobin(),
                                  cost_model=UnitStepCost(),
                                  engine_overrides={"max_num_seqs": 1})
        assert same_run(single, multi)


@pytest.fixture(scope="module")
def mixed_single():
    trace = mixed.generate(5, seed=3, rate=4.0)
    return trace, simulate(trace, "atlas")


@pytest.mark.parametrize("placement", sorted(PLACEMENTS))
def test_one_replica_is_exactly_the_single_engine_run_under_every_placement(placement,
                                                                           mixed_single):
    trace, single = mixed_single
    multi = simulate_replicas(trace, "atlas", 1, placement)
    assert same_run(single, multi)
    assert multi.extra["replicas"] == 1 and multi.extra["placement"] == placement
    (figures,) = multi.extra["per_replica"]
    assert figures["calls"] == len(single.call_finish)


def test_one_replica_under_tight_memory_is_the_single_engine_run():
    program = make_program("P", 0.0, *(make_call(f"b{i}", prompt_len=100, output_len=60)
                                       for i in range(8)))
    overrides = dict(num_kv_blocks=30, preemption_mode="swap")
    single = simulate(Trace((program,)), "atlas", engine_overrides=overrides)
    multi = simulate_replicas(Trace((program,)), "atlas", 1, "least_loaded",
                              engine_overrides=overrides)
    assert single.num_preemptions > 0 and same_run(single, multi)


# ----- several replicas -------------------------------------------------------------------
def test_two_replicas_round_robin_alternate_on_the_hand_derived_schedule():
    # One seat per replica, FCFS, 1 s a step. A -> r0 at 0: [0,3]. B -> r1 at 0.25 (idle,
    # jumps): [0.25,3.25]. C -> r0 at 0.5, added after r0's step in flight, at 1; it waits
    # for A: [3,6]. D -> r1 at 0.75, added at 1.25 (r1's step [0.25,1.25]): [3.25,6.25].
    trace = Trace(tuple(make_program(name, 0.25 * i, make_call("c", output_len=3))
                        for i, name in enumerate("ABCD")))
    placement = Recording(make_placement("round_robin"))
    result = unit_run(trace, 2, placement, max_num_seqs=1)
    assert [replica for _, replica, _ in placement.decisions] == [0, 1, 0, 1]
    assert call_replicas(result, placement) == {"A/c": 0, "B/c": 1, "C/c": 0, "D/c": 1}
    assert result.call_start == {"A/c": 0.0, "B/c": 0.25, "C/c": 1.0, "D/c": 1.25}
    assert result.call_first_token == {"A/c": 1.0, "B/c": 1.25, "C/c": 4.0, "D/c": 4.25}
    assert result.call_finish == {"A/c": 3.0, "B/c": 3.25, "C/c": 6.0, "D/c": 6.25}
    assert {p.program_id: p.finish for p in result.programs} == \
        {"A": 3.0, "B": 3.25, "C": 6.0, "D": 6.25}
    assert result.num_steps == 12 and result.end_time == 6.25 and result.busy_seconds == 12
    # At C's decision (t=0.5) both replicas have stepped past it (r0 to 1, r1 to 1.25) and
    # each runs one call of 10 prompt tokens + 1 generated.
    _, _, loads = placement.decisions[2]
    assert [(ld.replica, ld.calls_running, ld.running_tokens) for ld in loads] == \
        [(0, 1, 11), (1, 1, 11)]
    assert [r["calls"] for r in result.extra["per_replica"]] == [2, 2]
    assert [r["busy_seconds"] for r in result.extra["per_replica"]] == [6.0, 6.0]
    assert placement.ended == ["A", "B", "C", "D"]


def test_a_program_split_over_replicas_finishes_with_its_last_call_and_ends_everywhere(
        monkeypatch):
    checked = []
    original = LLMEngine.check_integrity

    def check(engine):
        checked.append((id(engine), engine.stats().load.programs_active))
        original(engine)

    monkeypatch.setattr(LLMEngine, "check_integrity", check)
    # root on r0; its three children on r1, r2, r0; the join c4 on r1.
    program = make_program("P", 0.0, make_call("root", output_len=1),
                           *(make_call(f"b{i}", output_len=2 + i, parents=["root"])
                             for i in range(3)),
                           make_call("c4", output_len=1, parents=["b0", "b1", "b2"]))
    placement = Recording(LocalRoundRobin())
    result = unit_run(Trace((program,)), 3, placement, policy="atlas")
    assert call_replicas(result, placement) == {"P/root": 0, "P/b0": 1, "P/b1": 2,
                                                "P/b2": 0, "P/c4": 1}
    # root [0,1]; b0..b2 start at 1 on their replicas: done at 3, 4, 5; c4 at 5: [5,6].
    assert result.call_finish == {"P/root": 1.0, "P/b0": 3.0, "P/b1": 4.0, "P/b2": 5.0,
                                  "P/c4": 6.0}
    (record,) = result.programs
    assert record.finish == 6.0 and record.generated_tokens == 1 + 2 + 3 + 4 + 1
    # Each call after the root lands on another replica than the program's call placed
    # before it: four moves in five placements.
    assert (result.extra["program_moves"], result.extra["placements"]) == (4, 5)
    assert len({engine for engine, _ in checked}) == 3  # every replica's engine checked
    assert [active for _, active in checked] == [0, 0, 0]  # and the program ended on each


def test_pinned_keeps_each_program_on_one_replica_and_spreads_programs():
    trace = lats.generate(4, seed=2, rate=4.0)
    placement = Recording(make_placement("pinned"))
    result = simulate_replicas(trace, "atlas", 3, placement)
    by_program: dict[str, set[int]] = {}
    for call, replica, _ in placement.decisions:
        by_program.setdefault(call.program_id, set()).add(replica)
    assert sorted(by_program) == sorted(p.program_id for p in trace.programs)
    assert all(len(replicas) == 1 for replicas in by_program.values())
    assert len(set().union(*by_program.values())) > 1
    assert len(result.programs) == 4
    assert sorted(placement.ended) == sorted(by_program)
    assert result.extra["program_moves"] == 0
    assert result.extra["placements"] == len(placement.decisions)


def test_cache_hit_rate_is_cached_over_prompt_tokens_of_the_calls():
    # c1's prompt starts with c0's 40 tokens: 2 full blocks (32 tokens) cached where c0 ran.
    program = make_program("P", 0.0, make_call("c0", prompt_len=40, output_len=3),
                           make_call("c1", prompt_len=60, output_len=2, parents=["c0"]))
    pinned = unit_run(Trace((program,)), 2, "pinned", policy="optimized")
    assert pinned.extra["cache_hit_rate"] == 32 / 100
    assert (pinned.extra["prompt_tokens"], pinned.extra["cached_tokens"]) == (100, 32)
    assert [(r["calls"], r["prompt_tokens"], r["cached_tokens"])
            for r in pinned.extra["per_replica"]] == [(2, 100, 32), (0, 0, 0)]
    split = unit_run(Trace((program,)), 2, "round_robin", policy="optimized")
    assert split.extra["cache_hit_rate"] == 0.0
    assert [(r["calls"], r["prompt_tokens"]) for r in split.extra["per_replica"]] == \
        [(1, 40), (1, 60)]
    assert split.prefill_tokens_computed == 100


def test_outcomes_report_each_calls_usage_and_give_the_rate():
    trace = lats.generate(3, seed=1, rate=2.0)
    placement = Recording(make_placement("least_loaded"))
    result = simulate_replicas(trace, "atlas", 2, placement)
    assert len(placement.outcomes) == len(placement.decisions) == len(result.call_finish)
    placed = {id(call): replica for call, replica, _ in placement.decisions}
    assert all(placed[id(call)] == outcome.replica for call, outcome in placement.outcomes)
    assert all(call.prompt_tokens == outcome.prompt_tokens for call, outcome in placement.outcomes)
    prompt = sum(outcome.prompt_tokens for _, outcome in placement.outcomes)
    cached = sum(outcome.cached_tokens for _, outcome in placement.outcomes)
    assert result.extra["cache_hit_rate"] == cached / prompt and cached > 0
    assert sum(r["prompt_tokens"] for r in result.extra["per_replica"]) == prompt
    assert result.extra["prompt_tokens"] == sum(c.prompt_len for p in trace.programs
                                                for c in p.calls)
    tokens = {p.program_id: sum(c.output_len for c in p.calls) for p in trace.programs}
    assert {p.program_id: p.generated_tokens for p in result.programs} == tokens
    for program in result.programs:  # a program's finish: its last call's, on any replica
        assert program.finish == max(t for key, t in result.call_finish.items()
                                     if key.startswith(program.program_id + "/"))
    figures = result.extra["per_replica"]
    assert all(f["max_load_tokens"] >= f["mean_load_tokens"] > 0 for f in figures)
    assert result.busy_seconds == pytest.approx(sum(f["busy_seconds"] for f in figures))
    cost = CostModel.from_names("a100-80g", "llama-3.1-8b")
    assert result.num_kv_blocks == 2 * cost.kv_blocks(16)


def test_requests_carry_the_prompts_chained_block_hashes():
    trace = lats.generate(2, seed=0, rate=1.0)
    placement = Recording(make_placement("prefix_aware"))
    result = simulate_replicas(trace, "atlas", 2, placement)
    programs = {p.program_id: (i, p) for i, p in enumerate(trace.programs)}
    maker = PromptMaker(128256)
    for key, (call, _, _) in zip(result.call_start, placement.decisions):
        index, program = programs[call.program_id]
        trace_call = next(c for c in program.calls if f"{program.program_id}/{c.call_id}" == key)
        prompt = maker.prompt(index, trace_call, program)
        assert call.prompt_tokens == len(prompt)
        assert call.block_hashes == prompt_block_hashes(prompt, 16)  # cached == from scratch
        assert len(call.block_hashes) == len(prompt) // 16


def test_block_hashes_chain_full_blocks_only():
    ids = list(range(100, 140))
    first = hash_block(None, ids[:16])
    assert prompt_block_hashes(ids, 16) == (first, hash_block(first, ids[16:32]))
    assert prompt_block_hashes(ids[:15], 16) == ()
    assert prompt_block_hashes(ids, 16, known=(first,)) == prompt_block_hashes(ids, 16)


def test_bad_arguments_name_the_problem():
    trace = Trace((make_program("A", 0.0, make_call("c")),))
    with pytest.raises(ValueError, match="replicas"):
        simulate_replicas(trace, "atlas", 0, "round_robin")
    with pytest.raises(ValueError, match="placement"):
        simulate_replicas(trace, "atlas", 2, "nope")
    with pytest.raises(ValueError, match="cutoff"):
        simulate_replicas(trace, "atlas", 2, "cutoff", cutoff=-1)

    class Wrong(Placement):
        def place(self, call, loads):
            return 7

    with pytest.raises(ValueError, match="returned replica 7"):
        simulate_replicas(trace, "atlas", 2, Wrong(), cost_model=UnitStepCost())


def test_replica_options():
    assert replica_options() == {} and replica_options(1, None, "auto") == {}
    assert replica_options(2) == dict(replicas=2, placement="agentix", cutoff=2048)
    assert replica_options(1, "pinned") == dict(replicas=1, placement="pinned", cutoff=2048)
    assert replica_options(2, kv_events=True, replica_speeds=[1, 0.5]) == dict(
        replicas=2, placement="agentix", cutoff=2048, kv_events=True, replica_speeds=(1, 0.5))
    with pytest.raises(ValueError, match="need replicas > 1 or a placement"):
        replica_options(1, kv_events=True)
    for bad in ([1.0], [1.0, 0.0], [1.0, True], [1.0, "x"]):
        with pytest.raises(ValueError, match="replica_speeds: need 2 numbers > 0"):
            replica_options(2, replica_speeds=bad)


def test_a_replica_at_half_speed_takes_two_seconds_a_step():
    # The round-robin schedule above with replica 1 at half speed: A on r0 [0,3] as before;
    # B on r1 from 0.25, 2 s a step: first token at 2.25, done at 6.25; C waits for A on r0
    # [3,6]; D -> r1 at 0.75, added after r1's step in flight (to 2.25): [6.25,12.25].
    trace = Trace(tuple(make_program(name, 0.25 * i, make_call("c", output_len=3))
                        for i, name in enumerate("ABCD")))
    result = simulate_replicas(trace, "vllm", 2, "round_robin", cost_model=UnitStepCost(),
                               engine_overrides=dict(max_num_seqs=1), replica_speeds=(1, 0.5))
    assert result.call_first_token == {"A/c": 1.0, "B/c": 2.25, "C/c": 4.0, "D/c": 8.25}
    assert result.call_finish == {"A/c": 3.0, "B/c": 6.25, "C/c": 6.0, "D/c": 12.25}
    assert [r["busy_seconds"] for r in result.extra["per_replica"]] == [6.0, 12.0]
    assert [r["num_steps"] for r in result.extra["per_replica"]] == [6, 6]


def test_adaptive_cutoff_runs():
    trace = mixed.generate(3, seed=1, rate=2.0)
    result = simulate_replicas(trace, "atlas", 2, "cutoff", cutoff="auto")
    assert len(result.programs) == 3 and result.extra["placement"] == "cutoff"


# ----- the command line -------------------------------------------------------------------
def test_cli_sim_with_replicas_prints_the_placement_figures(capsys):
    args = ["sim", "--workload", "lats", "--policy", "atlas", "--rate", "1", "--programs", "2"]
    cli.main(args + ["--replicas", "2", "--placement", "least_loaded", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert (out["replicas"], out["placement"], out["cutoff"]) == (2, "least_loaded", 2048)
    assert out["programs_completed"] == 2
    assert 0 < out["cache_hit_rate"] == out["cached_tokens"] / out["prompt_tokens"] < 1
    assert [r["replica"] for r in out["per_replica"]] == [0, 1]
    for key in ("calls", "prompt_tokens", "cached_tokens", "cache_hit_rate", "busy_seconds",
                "max_load_tokens", "mean_load_tokens"):
        assert all(key in r for r in out["per_replica"])
    assert sum(r["calls"] for r in out["per_replica"]) == out["num_calls"]
    cli.main(args + ["--json"])  # one engine: no placement keys
    assert "cache_hit_rate" not in json.loads(capsys.readouterr().out)
    cli.main(args + ["--replicas", "2", "--placement", "cutoff", "--cutoff", "auto"])
    text = capsys.readouterr().out
    assert "on 2 replicas behind cutoff (cutoff auto)" in text
    assert "replica 1" in text and "prefix cache" in text


def test_cli_replica_flags_parse_and_reject_bad_values(capsys):
    parser = cli.build_parser()
    for command in (["sim"], ["sweep"], ["capacity"]):
        args = parser.parse_args(command + ["--workload", "lats", "--replicas", "3",
                                            "--placement", "pinned", "--cutoff", "auto"])
        assert (args.replicas, args.placement, args.cutoff) == (3, "pinned", "auto")
        args = parser.parse_args(command + ["--workload", "lats"])
        assert (args.replicas, args.placement, args.cutoff) == (1, None, 2048)
    assert parser.parse_args(["sim", "--workload", "lats", "--cutoff", "512"]).cutoff == 512
    for bad in (["--replicas", "0"], ["--placement", "nope"], ["--cutoff", "-1"],
                ["--cutoff", "many"]):
        with pytest.raises(SystemExit):
            parser.parse_args(["sim", "--workload", "lats", *bad])
        assert bad[0] in capsys.readouterr().err


def test_cli_capacity_threads_the_replica_flags(monkeypatch, tmp_path, capsys):
    from test_capacity import quadratic

    seen = []
    monkeypatch.setattr(cap_mod, "generate_trace", lambda w, n, seed, rate: Trace(()))

    def fake_run_point(workload, trace, policy, rate, preset, model, **multi):
        seen.append(multi)
        return quadratic(rate, policy)

    monkeypatch.setattr(cap_mod, "run_point", fake_run_point)
    cli.main(["capacity", "--finite-trace", "--workload", "mixed", "--policies", "atlas",
              "--programs", "3", "--target", "0.16", "--iterations", "1", "--out",
              str(tmp_path), "--no-progress", "--replicas", "4", "--placement", "least_loaded"])
    assert seen and all(m == dict(replicas=4, placement="least_loaded", cutoff=2048)
                        for m in seen)
    assert "on 4 replicas behind least_loaded;" in capsys.readouterr().out


def test_cli_kv_events_and_speeds_are_checked(tmp_path, capsys):
    base = ["--workload", "lats", "--programs", "2"]
    with pytest.raises(SystemExit, match="replica_speeds: need 3 numbers > 0"):
        cli.main(["sim", *base, "--replicas", "3", "--replica-speeds", "1,0.5"])
    with pytest.raises(SystemExit, match="need replicas > 1 or a placement"):
        cli.main(["sim", *base, "--kv-events"])
    with pytest.raises(SystemExit, match="not --finite-trace"):
        cli.main(["capacity", *base, "--finite-trace", "--replicas", "2", "--kv-events",
                  "--out", str(tmp_path), "--target", "1"])
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["sim", *base, "--replica-speeds", "1,0"])
    assert "--replica-speeds" in capsys.readouterr().err
    cli.main(["sim", *base, "--rate", "1", "--replicas", "2", "--kv-events",
              "--replica-speeds", "1,0.5"])
    assert "on 2 replicas behind agentix, KV events, speeds 1,0.5" in \
        capsys.readouterr().out


def test_cli_sweep_runs_replicas(tmp_path, capsys):
    cli.main(["sweep", "--workload", "lats", "--policies", "atlas", "--rates", "1",
              "--programs", "2", "--target", "1", "--out", str(tmp_path), "--no-progress",
              "--replicas", "2", "--placement", "round_robin"])
    out = capsys.readouterr().out
    assert "on 2 replicas behind round_robin;" in out
    assert "--replicas 2 --placement round_robin" in (tmp_path / "sweep_lats.md").read_text()


class Scripted(Placement):
    """The replicas listed, one per decision, in decision order (test-local)."""

    name = "scripted"

    def __init__(self, route: list[int]) -> None:
        self.route = list(route)

    def place(self, call, loads):
        return self.route.pop(0)


def test_a_program_that_expired_on_a_replica_it_left_is_opened_there_again():
    """P's first call runs on r0, its second on r1; while Q keeps r0 busy, P idles there past
    program_ttl and r0 expires it. P's third call, back on r0, opens it there anew (it used
    to fail: the replica no longer knew the program)."""
    p = make_program("P", 0.0, make_call("c1", output_len=1),
                     make_call("c2", output_len=1, parents=["c1"], delay=2.0),
                     make_call("c3", output_len=1, parents=["c2"], delay=20.0))
    q = make_program("Q", 0.5, make_call("long", output_len=40))
    result = unit_run(Trace((p, q)), 2, Scripted([0, 0, 1, 0]), policy="atlas",
                      program_ttl=5.0)
    assert sorted(result.call_finish) == ["P/c1", "P/c2", "P/c3", "Q/long"]
    assert {record.program_id for record in result.programs} == {"P", "Q"}
    assert [r["calls"] for r in result.extra["per_replica"]] == [3, 1]


def test_each_call_carries_its_programs_service_over_every_replica(monkeypatch):
    """As a router does: a program's calls alternate between two replicas (round robin), and
    each is sent with the service its earlier calls got on both (PLAS sums it), so a replica
    raises the program to it instead of seeing only its own share."""
    sent, served = [], {}
    add, pop = LLMEngine.add_call, LLMEngine.pop_completion

    def add_call(engine, program_id, prompt, params=None, **kw):
        sent.append((kw["call_id"], kw["program_service"]))
        return add(engine, program_id, prompt, params, **kw)

    def pop_completion(engine, call_id):
        completion = pop(engine, call_id)
        served[call_id] = completion.service_seconds
        return completion

    monkeypatch.setattr(LLMEngine, "add_call", add_call)
    monkeypatch.setattr(LLMEngine, "pop_completion", pop_completion)
    program = make_program("P", 0.0, make_call("c0", output_len=2),
                           make_call("c1", output_len=3, parents=["c0"]),
                           make_call("c2", output_len=1, parents=["c1"]))
    placement = Recording(LocalRoundRobin())
    result = unit_run(Trace((program,)), 2, placement, policy="plas")
    assert [replica for _, replica, _ in placement.decisions] == [0, 1, 0]
    assert served["P/c0"] > 0 and served["P/c1"] > 0
    assert sent == [("P/c0", 0.0), ("P/c1", served["P/c0"]),
                    ("P/c2", served["P/c0"] + served["P/c1"])]
    assert result.extra["program_moves"] == 2
