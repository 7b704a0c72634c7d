import math

import pytest

import bench.analysis.steady_state as ss
from bench import cli
from bench.analysis.capacity import BASE_RATE, LatencyTarget, retimed
from bench.analysis.steady_report import (steady_capacity_table, steady_points_table,
                                          window_text, write_steady_outputs)
from bench.analysis.steady_state import (BacklogWatch, SteadyConfig, SteadyPoint, TracePrefixes,
                                         Verdict, Window, find_steady_capacities, half_means,
                                         judge, measured_ids, run_steady_point, seed_capacities,
                                         spread)
from bench.analysis.sweep import SweepPoint, capacity, generate_trace, meets_target
from bench.analysis.sweep_report import latency_table, points_table
from bench.sim.metrics import compute_metrics
from bench.sim.multi_sim import simulate_replicas
from bench.sim.simulate import EarlyStop, ProgramResult, simulate
from bench.sim.trace import Trace, TraceCall, TraceProgram


def make_program(program_id, arrival, *calls):
    return TraceProgram(program_id, arrival, tuple(calls), "test")


def make_call(call_id, prompt_len=200, output_len=40, parents=()):
    return TraceCall(call_id, prompt_len, output_len, tuple(parents))


def at(*arrivals):
    """One single-call program per arrival time, ids p0, p1, ..."""
    return Trace(tuple(make_program(f"p{i}", a, make_call("c")) for i, a in enumerate(arrivals)))


def record(arrival, latency, tokens=10):
    return ProgramResult(f"r{arrival}", "test", arrival, arrival + latency * tokens, tokens, 1)


def point(rate, mean, policy="atlas", overloaded=False, workload="lats"):
    return SweepPoint(workload, policy, rate, 4, 4, mean, 2 * mean, 3 * mean, 10.0, 5.0, 0.1,
                      0.2, 100, 0, 0.5, overloaded)


# ----- the window --------------------------------------------------------------------------
def test_window_is_programs_converted_to_seconds_by_rate():
    config = SteadyConfig(warmup_programs=2, window_programs=3, tail_programs=4)
    assert config.total_programs(1.0) == config.total_programs(7.0) == 9
    assert config.max_in_system(7.0) == 5
    assert config.window(1.0) == Window(2.0, 5.0)
    assert config.window(4.0) == Window(0.5, 1.25)
    assert 2.0 in Window(2.0, 5.0) and 5.0 not in Window(2.0, 5.0)
    for bad in (dict(warmup_programs=-1), dict(window_programs=0), dict(tail_programs=0),
                dict(max_backlog_growth=0.0)):
        with pytest.raises(ValueError, match=next(iter(bad))):
            SteadyConfig(**bad)
    with pytest.raises(ValueError, match="rate"):
        config.window(math.inf)


def test_warm_up_and_tail_in_seconds_are_programs_at_each_rate():
    config = SteadyConfig(warmup_programs=99, window_programs=3, tail_programs=99,
                          warmup_seconds=2.5, tail_seconds=10.0)
    assert (config.warmup_at(2.0), config.tail_at(2.0)) == (5, 20)
    assert (config.warmup_at(4.2), config.tail_at(4.2)) == (10, 42)  # round(10.5) is 10
    assert config.total_programs(4.2) == 55 and config.max_in_system(4.2) == 13
    assert config.window(2.0) == Window(2.5, 4.0)  # 5 programs of warm-up, then 3
    assert config.window(2.0, timed_at=1.0) == Window(5.0, 8.0)  # in the base trace's time
    assert config.window(4.2) == Window(10 / 4.2, 13 / 4.2)
    assert SteadyConfig(tail_seconds=0.0).tail_at(3.0) == 1  # a tail is never empty
    assert SteadyConfig(warmup_seconds=0.0).warmup_at(3.0) == 0
    assert window_text(SteadyConfig(tail_seconds=280.0), []).startswith(
        "Steady state: warm-up 600 programs, window 600, tail 280 s of arrivals; measured: "
        "the programs arriving in [600/r, 1200/r) s at rate r")
    for bad in (dict(warmup_seconds=-1.0), dict(tail_seconds=math.inf),
                dict(warmup_seconds=math.nan)):
        with pytest.raises(ValueError, match=next(iter(bad))):
            SteadyConfig(**bad)


def test_trace_prefixes_generate_again_only_for_a_longer_trace(monkeypatch):
    generated = []

    def fake_generate(workload, n, seed, rate):
        generated.append(n)
        return at(*(seed + i + 1.0 for i in range(n)))

    monkeypatch.setattr(ss, "generate_trace", fake_generate)
    traces = TracePrefixes("lats", 3)
    first = traces.first(4)
    assert [p.arrival for p in first.programs] == [4.0, 5.0, 6.0, 7.0]
    assert traces.first(4) is first and traces.first(2).programs == first.programs[:2]
    assert traces.first(6).programs[:4] == first.programs and generated == [4, 6]
    assert len(traces.first(5).programs) == 5 and generated == [4, 6]


def test_measured_programs_are_those_arriving_in_the_window():
    trace = at(0.5, 1.9, 2.0, 3.5, 4.99, 5.0, 7.0)
    config = SteadyConfig(warmup_programs=2, window_programs=3, tail_programs=2)
    assert measured_ids(trace, config.window(BASE_RATE)) == {"p2", "p3", "p4"}
    # Retimed to 4 programs/s: the same programs in the window [0.5, 1.25) s.
    assert measured_ids(retimed(trace, 4.0), config.window(4.0)) == {"p2", "p3", "p4"}
    with pytest.raises(ValueError, match="no program arrives"):
        measured_ids(trace, Window(5.5, 6.5))


# ----- the overload rule -------------------------------------------------------------------
def test_half_means_split_by_arrival():
    records = [record(3.0, 0.4), record(0.0, 0.1), record(2.0, 0.3), record(1.0, 0.2),
               record(4.0, 0.5)]
    first, second = half_means(records)  # by arrival: 0.1, 0.2 | 0.3, 0.4, 0.5
    assert first == pytest.approx(0.15) and second == pytest.approx(0.4)
    assert all(math.isnan(m) for m in half_means(records[:1]))


def test_judge_backlog_undrained_steady():
    assert judge(4, 4, backlog_grew=False) is Verdict.STEADY
    assert judge(3, 4, backlog_grew=False) is Verdict.UNDRAINED
    assert judge(3, 4, backlog_grew=True) is Verdict.BACKLOG
    assert judge(4, 4, backlog_grew=True) is Verdict.BACKLOG


def test_backlog_watch_measures_growth_over_the_window_halves():
    # Window [10, 20): backlog 4 over [10, 15), then 4 until 17 and 7 after: means 4 and 5.8
    # (the second half's integral is 2 * 4 + 3 * 7 = 29), growth 2 * 1.8 / 6 programs = 0.6.
    watch = BacklogWatch(Window(10.0, 20.0), programs=6, limit=50, max_growth=0.5)
    assert not watch(0.0, 3) and not watch(10.0, 4) and not watch(17.0, 7)
    assert math.isnan(watch.growth) and not watch.tripped
    assert watch(21.0, 7) and watch.growth == pytest.approx(0.6)
    assert watch(22.0, 0)  # stays tripped
    steady = BacklogWatch(Window(10.0, 20.0), programs=6, limit=50, max_growth=0.7)
    for now, backlog in ((0.0, 3), (10.0, 4), (17.0, 7), (21.0, 7)):
        assert not steady(now, backlog)
    assert steady.growth == pytest.approx(0.6)
    crowded = BacklogWatch(Window(10.0, 20.0), programs=6, limit=5, max_growth=0.7)
    assert not crowded(0.0, 5) and crowded(1.0, 6) and math.isnan(crowded.growth)


def test_time_in_system_is_littles_law_over_the_window_seen():
    # Window [10, 20): backlog 4 over [10, 17), 7 over [17, 20): mean 4.9; at 2 programs/s a
    # program spends 2.45 s in the system. Before the window there is no estimate.
    watch = BacklogWatch(Window(10.0, 20.0), programs=6, limit=50, max_growth=0.5)
    watch(0.0, 3)
    assert math.isnan(watch.time_in_system(2.0))
    watch(10.0, 4)
    watch(15.0, 4)
    assert watch.time_in_system(2.0) == pytest.approx(2.0)  # [10, 15) seen: backlog 4
    watch(17.0, 7)
    watch(25.0, 0)  # past the window: only [10, 20) counts
    assert watch.time_in_system(2.0) == pytest.approx(2.45)


def test_a_backlog_verdict_says_when_the_warm_up_was_short():
    def run(time_in_system):
        return SteadyPoint(0, Window(10.0, 30.0), 20, math.nan, math.nan, 0.4,
                           Verdict.BACKLOG, point(2.0, 0.5, "atlas", True, "mixed"),
                           time_in_system)
    short, long_enough, unknown = run(6.0), run(5.0), run(math.nan)
    assert not short.warm_enough and long_enough.warm_enough and unknown.warm_enough
    assert ("backlog +0.40; warm-up 10 s < 2 x time in system 6 s: may still be filling)"
            in steady_points_table([short]))
    assert "may still be filling" not in steady_points_table([long_enough, unknown])


def test_an_overloaded_point_misses_every_target_and_is_not_interpolated_towards():
    assert meets_target(point(1.0, 0.1), 0.2)
    assert not meets_target(point(1.0, 0.1, overloaded=True), 0.2)
    points = [point(1.0, 0.1), point(2.0, 0.15, overloaded=True)]
    assert capacity(points, "atlas", 0.2) == 1.0  # not 2.0 and not interpolated
    rows = points_table(points).splitlines()[2:]
    assert rows[0].startswith("| atlas | 1 | 0.1000 | 0.2000 | 0.3000 |")
    assert rows[1].startswith("| atlas | 2 | overloaded | - | - | 0.100 |")
    assert "| atlas | 0.1000 / 0.2000 / 0.3000 | overloaded |" in latency_table(points)


# ----- the early stop ----------------------------------------------------------------------
def busy_trace():
    """20 two-call programs arriving every 0.05 s: they overlap and queue on the engine."""
    return Trace(tuple(make_program(f"p{i}", 0.05 * (i + 1),
                                    make_call("a", 300 + 37 * i, 60 + 7 * (i % 5)),
                                    make_call("b", 500 + 41 * i, 50 + 11 * (i % 3), ("a",)))
                       for i in range(20)))


def measured_view(result, ids):
    programs = sorted((p for p in result.programs if p.program_id in ids),
                      key=lambda p: p.program_id)
    calls = {k: (result.call_start[k], result.call_first_token[k], result.call_finish[k])
             for k in result.call_finish if k.split("/")[0] in ids}
    return programs, calls


@pytest.mark.parametrize("replicas", [0, 2])
def test_early_stop_gives_the_measured_programs_bit_identical_results(replicas):
    trace = busy_trace()
    ids = frozenset(f"p{i}" for i in range(8))
    overrides = {"max_num_seqs": 4}

    def run(stop=None):
        if replicas:
            return simulate_replicas(trace, "atlas", replicas, "round_robin",
                                     engine_overrides=overrides, stop=stop)
        return simulate(trace, "atlas", engine_overrides=overrides, stop=stop)

    full, stopped = run(), run(EarlyStop(ids))
    assert len(full.programs) == 20 and 8 <= len(stopped.programs) < 20
    assert ids <= {p.program_id for p in stopped.programs}
    assert stopped.end_time < full.end_time
    assert measured_view(stopped, ids) == measured_view(full, ids)
    assert compute_metrics(measured_view(stopped, ids)[0]) == \
        compute_metrics(measured_view(full, ids)[0])
    assert stopped.ttft_percentile(99, ids) == full.ttft_percentile(99, ids)


def test_early_stop_at_the_deadline_and_bad_stops():
    trace = busy_trace()
    full = simulate(trace, "vllm", engine_overrides={"max_num_seqs": 2})
    finish = sorted(p.finish for p in full.programs)
    deadline = finish[5]
    stopped = simulate(trace, "vllm", engine_overrides={"max_num_seqs": 2},
                       stop=EarlyStop(frozenset({"p19"}), deadline=deadline))
    assert {p.program_id for p in stopped.programs} == \
        {p.program_id for p in full.programs if p.finish <= stopped.end_time}
    assert deadline < stopped.end_time < finish[-1]
    with pytest.raises(ValueError, match="not in the trace"):
        simulate(trace, "vllm", stop=EarlyStop(frozenset({"nope"})))
    with pytest.raises(ValueError, match="programs"):
        EarlyStop(frozenset())


@pytest.mark.parametrize("replicas", [0, 2])
def test_early_stop_waits_for_not_before_after_its_programs_finish(replicas):
    trace = busy_trace()
    ids = frozenset({"p0"})
    seen = []

    def watch(now, in_system):
        seen.append(now)
        return False

    def run(stop=None):
        if replicas:
            return simulate_replicas(trace, "vllm", replicas, "round_robin", stop=stop)
        return simulate(trace, "vllm", stop=stop)

    full, early = run(), run(EarlyStop(ids))
    not_before = (early.end_time + full.end_time) / 2
    waited = run(EarlyStop(ids, watch=watch, not_before=not_before))
    assert not_before <= seen[-1] <= waited.end_time  # the stopping round was asked too
    assert len(early.programs) < len(waited.programs) < len(full.programs)
    assert measured_view(waited, ids) == measured_view(early, ids)
    with pytest.raises(ValueError, match="not_before"):
        EarlyStop(ids, not_before=math.nan)


@pytest.mark.parametrize("replicas", [0, 2])
def test_early_stop_when_the_watch_says_so(replicas):
    trace = busy_trace()
    overrides = {"max_num_seqs": 2}
    seen = []

    def watch(now, in_system):
        seen.append((now, in_system))
        return in_system > 5

    def run(stop=None):
        if replicas:
            return simulate_replicas(trace, "vllm", replicas, "round_robin",
                                     engine_overrides=overrides, stop=stop)
        return simulate(trace, "vllm", engine_overrides=overrides, stop=stop)

    full, stopped = run(), run(EarlyStop(frozenset({"p19"}), watch=watch))
    times = [t for t, _ in seen]
    assert times == sorted(times) and seen[-1][1] == 6
    assert all(n <= 5 for _, n in seen[:-1])
    done = {p.program_id for p in stopped.programs}
    assert done == {p.program_id for p in full.programs if p.finish <= seen[-1][0]}
    assert len(done) < 20


# ----- one steady point on a real workload ---------------------------------------------------
TINY = SteadyConfig(warmup_programs=6, window_programs=12, tail_programs=60,
                    max_backlog_growth=0.5)


@pytest.fixture(scope="module")
def sharegpt_base():
    return generate_trace("sharegpt", TINY.total_programs(BASE_RATE), 0, BASE_RATE)


def test_a_light_rate_is_steady_and_a_burst_is_overloaded(sharegpt_base):
    light = run_steady_point("sharegpt", sharegpt_base, 0, "optimized", 0.05, TINY)
    ids = measured_ids(sharegpt_base, TINY.window(BASE_RATE))
    assert light.verdict is Verdict.STEADY and not light.point.overloaded
    assert light.measured == light.point.num_programs == light.point.programs_completed == len(ids)
    assert light.window == Window(6 / 0.05, 18 / 0.05)
    # All measured programs finish before the window closes; the run goes on to its end, so
    # the backlog's growth is judged (it was NaN when the run stopped at their finish).
    assert abs(light.backlog_growth) <= TINY.max_backlog_growth
    assert light.first_half > 0 and light.second_half > 0
    # 50/s, several times the capacity: more than 18 programs in the system before the
    # measured ones are done (and long before the last arrival, at about 1.6 s).
    heavy = run_steady_point("sharegpt", sharegpt_base, 0, "optimized", 50.0, TINY)
    assert heavy.verdict is Verdict.BACKLOG and heavy.point.overloaded
    assert heavy.point.programs_completed < heavy.measured
    assert not meets_target(heavy.point, 1e9)


def test_the_steady_point_is_the_full_runs_over_the_measured_programs(sharegpt_base):
    steady = run_steady_point("sharegpt", sharegpt_base, 0, "atlas", 0.2, TINY)
    full = simulate(retimed(sharegpt_base, 0.2), "atlas")
    ids = measured_ids(sharegpt_base, TINY.window(BASE_RATE))
    metrics = compute_metrics([p for p in full.programs if p.program_id in ids])
    assert steady.point.mean_norm_latency == metrics.mean_norm_latency
    assert steady.point.p99_norm_latency == metrics.p99_norm_latency
    assert steady.point.throughput_tokens_per_s == metrics.throughput_tokens_per_s
    assert steady.point.ttft_p99_s == full.ttft_percentile(99, ids)


def test_a_warm_up_in_seconds_measures_the_programs_after_it(sharegpt_base):
    # 40 s of warm-up: 2 programs at 0.05/s, 8 at 0.2/s; the window is 12 programs, the tail
    # 10 s (1 and 2 programs). A longer trace than needed is cut to the rate's length.
    config = SteadyConfig(window_programs=12, max_backlog_growth=0.5, warmup_seconds=40.0,
                          tail_seconds=10.0)
    light = run_steady_point("sharegpt", sharegpt_base, 0, "optimized", 0.05, config)
    assert light.window == Window(40.0, 14 / 0.05) and light.verdict is Verdict.STEADY
    assert light.measured == len(measured_ids(sharegpt_base, Window(2.0, 14.0)))
    exact = Trace(sharegpt_base.programs[:config.total_programs(0.2)])
    busier = run_steady_point("sharegpt", sharegpt_base, 0, "optimized", 0.2, config)
    again = run_steady_point("sharegpt", exact, 0, "optimized", 0.2, config)
    assert (busier.verdict, busier.measured, busier.point.mean_norm_latency) == \
        (again.verdict, again.measured, again.point.mean_norm_latency)
    assert busier.window == Window(40.0, 20 / 0.2)
    assert busier.measured == len(measured_ids(exact, Window(8.0, 20.0)))
    with pytest.raises(ValueError, match="1 programs, 22 needed at 0.2/s"):
        run_steady_point("sharegpt", Trace(sharegpt_base.programs[:1]), 0, "optimized", 0.2,
                         config)


# ----- the search over seeds -----------------------------------------------------------------
@pytest.fixture
def fake_points(monkeypatch):
    """`run_steady_point` replaced: mean latency 0.01 r^2 x (1 + seed / 4), overloaded from
    rate 16; the traces generated are listed."""
    generated, multis, overrides = [], [], []
    monkeypatch.setattr(ss, "generate_trace", lambda w, n, seed, rate:
                        generated.append((w, n, seed, rate)) or at(*map(float, range(1, n + 1))))

    def fake(workload, base, seed, policy, rate, config, preset, model, multi,
             engine_overrides=None):
        multis.append(multi)
        overrides.append(engine_overrides)
        mean = 0.01 * rate * rate * (1 + seed / 4) * (4.0 if policy == "vllm" else 1.0)
        overloaded = rate >= 16
        verdict = Verdict.BACKLOG if overloaded else Verdict.STEADY
        return SteadyPoint(seed, config.window(rate), 600, mean, mean, 0.5 if overloaded else 0,
                           verdict, point(rate, mean, policy, overloaded, workload))

    monkeypatch.setattr(ss, "run_steady_point", fake)
    return generated, multis, overrides


def test_find_steady_capacities_searches_every_seed(fake_points):
    generated, _, _ = fake_points
    config = SteadyConfig(10, 20, 30)
    runs = find_steady_capacities("lats", ["vllm", "atlas"], [0.16], [0, 4], config, 1.0,
                                  iterations=1, progress=False)
    assert generated == [("lats", 60, 0, BASE_RATE), ("lats", 60, 4, BASE_RATE)]
    assert [r.seed for r in runs] == [0] * 9 + [4] * 7
    # seed 0, atlas: 1, 2, 4 meet 0.16, 8 misses, bisect at sqrt(32): capacity 4.
    assert [r.point.rate for r in runs if r.seed == 0 and r.point.policy == "atlas"] == \
        pytest.approx([1.0, 2.0, 4.0, 8.0, math.sqrt(32)])
    assert seed_capacities(runs, "atlas", 0.16) == {0: pytest.approx(4.0),
                                                    4: pytest.approx(2 * math.sqrt(2))}
    assert seed_capacities(runs, "vllm", 0.16) == {0: pytest.approx(2.0),
                                                   4: pytest.approx(math.sqrt(2))}
    # A target met at every rate that is not overloaded: 4, 8 meet, 16 (overloaded) misses,
    # bisect at 16 / sqrt(2), then 16 / 2 ** (1 / 4): the last meeting rate, no interpolation.
    runs = find_steady_capacities("lats", ["atlas"], [100.0], [0], config, 4.0,
                                  iterations=2, progress=False)
    assert [r.point.rate for r in runs] == pytest.approx([4.0, 8.0, 16.0, 16 / 2 ** 0.5,
                                                          16 / 2 ** 0.25])
    assert seed_capacities(runs, "atlas", 100.0) == {0: pytest.approx(16 / 2 ** 0.25)}


def test_a_warm_up_in_seconds_grows_the_trace_with_the_rate(fake_points, tmp_path):
    generated, _, _ = fake_points
    config = SteadyConfig(window_programs=20, warmup_seconds=5.0, tail_seconds=10.0)
    runs = find_steady_capacities("lats", ["atlas"], [0.16], [0], config, 1.0, iterations=0,
                                  progress=False)
    # 1, 2, 4/s meet 0.16, 8/s misses: warm-up and tail grow with the rate (5 and 10 s).
    assert [r.point.rate for r in runs] == [1.0, 2.0, 4.0, 8.0]
    assert [n for _, n, _, _ in generated] == [35, 50, 80, 140]
    assert [r.window for r in runs] == [Window(5.0, 25.0), Window(5.0, 15.0),
                                        Window(5.0, 10.0), Window(5.0, 7.5)]
    md, _ = write_steady_outputs(runs, [LatencyTarget(0.16, "given")], config, tmp_path,
                                 "agentix bench capacity x")
    text = md.read_text()
    assert ("Steady state: warm-up 5 s of arrivals (w = round(5 x r) programs at rate r), "
            "window 20 programs, tail 10 s of arrivals; measured: the programs arriving in "
            "[w/r, (w + 20)/r) s at rate r (per run: below).") in text
    assert "by more than 0.2 of the window's programs or passes w + 20, or when" in text


def test_spread_min_median_max():
    assert spread([3.0, 1.0, 2.0]) == (1.0, 2.0, 3.0)
    assert spread([4.0, None, 2.0, 3.0]) == (None, 2.0, 4.0)  # lower middle of an even count
    assert spread([5.0]) == (5.0, 5.0, 5.0)


def test_reports_show_the_spread_the_window_and_overloaded_points(fake_points, tmp_path):
    config = SteadyConfig(10, 20, 30)
    runs = find_steady_capacities("lats", ["vllm", "atlas"], [0.16], [0, 4], config, 1.0,
                                  iterations=1, progress=False)
    table = steady_capacity_table(runs, 0.16)
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
            for line in table.splitlines() if line.startswith("| ") and "policy" not in line}
    assert rows["vllm"] == ["1.41", "1.41", "2", "0: 2, 4: 1.41", "1.00x"]
    assert rows["atlas"] == ["2.83", "2.83", "4", "0: 4, 4: 2.83", "2.00x"]
    heavy = find_steady_capacities("lats", ["atlas"], [1.0], [0], config, 16.0,
                                   iterations=0, progress=False)
    text = steady_points_table(heavy)
    assert "| 0 | atlas | 16 | [0.6, 1.9) | 600 | 4 | overloaded | " in text
    assert "overloaded: backlog grows (4/600 done at the stop, backlog +0.50)" in text
    assert "| 0 | atlas | 8 | [1.2, 3.8) | 600 | 4 | 0.6400 / 1.2800 / 1.9200 | " in text
    assert "| steady, backlog +0.00 |" in text
    md, png = write_steady_outputs(runs, [LatencyTarget(0.16, "given")], config, tmp_path,
                                   "agentix bench capacity x")
    text = md.read_text()
    assert "60 programs per seed (warm-up 10, window 20, tail 30)" in text
    assert "by more than 0.2 of the window's programs or passes 30" in text
    assert "[10/r, 30/r) s at rate r (seed 0: 600, seed 4: 600 programs)" in text
    assert "## Target 0.1600 s/token (given)" in text and "## Every run" in text
    assert png.read_bytes()[:4] == b"\x89PNG"


# ----- the command line ---------------------------------------------------------------------
def test_cli_capacity_flags_parse():
    parser = cli.build_parser()
    args = parser.parse_args(["capacity", "--workload", "sharegpt"])
    assert args.finite_trace is False and args.seeds == [0, 1, 2]
    assert (args.warmup_programs, args.window_programs, args.tail_programs,
            args.max_backlog_growth) == (600, 600, 2400, 0.2)
    args = parser.parse_args(["capacity", "--workload", "sharegpt", "--seeds", "3,1,3",
                              "--warmup-programs", "0", "--window-programs", "50",
                              "--tail-programs", "70", "--max-backlog-growth", "0.5"])
    assert (args.seeds, args.warmup_programs, args.window_programs, args.tail_programs,
            args.max_backlog_growth) == ([3, 1], 0, 50, 70, 0.5)
    assert parser.parse_args(["capacity", "--workload", "lats", "--finite-trace"]).finite_trace
    assert not parser.parse_args(["capacity", "--workload", "lats",
                                  "--steady-state"]).finite_trace
    args = parser.parse_args(["capacity", "--workload", "lats", "--warmup-seconds", "250",
                              "--tail-seconds", "280.5"])
    assert (args.warmup_seconds, args.tail_seconds) == (250.0, 280.5)
    for bad in (["--finite-trace", "--steady-state"], ["--seeds", "a"], ["--seeds", ","],
                ["--warmup-programs", "5", "--warmup-seconds", "5"],
                ["--tail-programs", "5", "--tail-seconds", "5"], ["--warmup-seconds", "-1"],
                ["--tail-seconds", "inf"],
                ["--max-backlog-growth", "0"], ["--window-programs", "0"],
                ["--tail-programs", "0"],
                ["--warmup-programs", "-1"]):
        with pytest.raises(SystemExit):
            parser.parse_args(["capacity", "--workload", "lats", *bad])


def run_small_capacity(tmp_path, *flags: str) -> None:
    """`agentix bench capacity` on lats, target 0.16 only, a 10 / 20 / 30-program window."""
    cli.main(["capacity", "--workload", "lats", "--target", "0.16", "--fixed-target", "0",
              "--warmup-programs", "10", "--window-programs", "20", "--tail-programs", "30",
              "--out", str(tmp_path), "--no-progress", *flags])


def test_cli_capacity_runs_at_steady_state_by_default(fake_points, tmp_path, capsys):
    run_small_capacity(tmp_path, "--policies", "vllm,atlas", "--iterations", "1",
                       "--seeds", "0,4", "--replicas", "2")
    generated, multis, _ = fake_points
    assert multis and all(m == dict(replicas=2, placement="agentix", cutoff=2048)
                          for m in multis)
    out = capsys.readouterr().out
    assert "lats at steady state, seeds 0,4, llama-3.1-8b on a100-80g, on 2 replicas" in out
    assert "measured: the programs arriving in [10/r, 30/r) s" in out
    assert "| atlas | 2.83 | 2.83 | 4 | 0: 4, 4: 2.83 | 2.00x |" in out
    assert generated == [("lats", 60, 0, BASE_RATE), ("lats", 60, 4, BASE_RATE)]
    text = (tmp_path / "capacity_lats.md").read_text()
    assert text.startswith("# Steady-state capacity: lats")
    assert "--seeds 0,4" in text


def test_cli_capacity_sets_engine_fields_at_steady_state_only(fake_points, tmp_path, capsys):
    run_small_capacity(tmp_path, "--policies", "atlas", "--iterations", "0", "--seeds", "0",
                       "--set", "ttft_slo_seconds=0.25")
    _, _, overrides = fake_points
    assert overrides and all(o == {"ttft_slo_seconds": 0.25} for o in overrides)
    assert "a100-80g, ttft_slo_seconds=0.25; latency targets" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="--set are for the steady-state method"):
        cli.main(["capacity", "--workload", "lats", "--finite-trace", "--target", "0.16",
                  "--set", "ttft_slo_seconds=0.25", "--out", str(tmp_path), "--no-progress"])


def test_steady_searches_in_worker_processes_find_the_runs_found_one_at_a_time():
    config = SteadyConfig(window_programs=6, max_backlog_growth=0.5, warmup_seconds=20.0,
                          tail_seconds=60.0)
    args = ("sharegpt", ["optimized", "atlas"], [1.0], [0, 1], config, 0.05)
    kwargs = dict(iterations=0, max_expansions=1, progress=False)
    alone = find_steady_capacities(*args, **kwargs)
    assert [(r.seed, r.point.policy) for r in alone][::2] == \
        [(0, "optimized"), (0, "atlas"), (1, "optimized"), (1, "atlas")]

    def figures(runs):  # all but the wall clock, which depends on the machine
        return [(r.seed, r.window, r.verdict, {**r.point.to_dict(), "sim_wall_seconds": 0})
                for r in runs]

    assert figures(find_steady_capacities(*args, jobs=2, **kwargs)) == figures(alone)
