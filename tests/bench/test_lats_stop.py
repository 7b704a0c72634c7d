import statistics

import pytest

from bench.sim.workloads import lats, lats_stop


def test_deterministic_per_seed_with_exact_counts():
    trace = lats_stop.generate(6, seed=0, rate=1.0)
    assert trace == lats_stop.generate(6, seed=0, rate=1.0)
    assert [len(p.calls) for p in trace.programs] == [331, 89, 144, 177, 551, 265]
    assert [lats_stop.iterations_of(len(p.calls)) for p in trace.programs] == \
        [30, 8, 13, 16, 50, 24]
    assert {p.workload for p in trace.programs} == {"lats_stop"}
    assert lats_stop.generate(6, seed=1, rate=1.0) != trace


def test_iterations_have_the_lats_shape_and_prompts_carry_the_path():
    program = lats_stop.generate(1, seed=0, rate=1.0).programs[0]
    by_id = {c.call_id: c for c in program.calls}
    root = by_id["root"]
    path = root.prompt_len + root.output_len
    expands = [by_id[f"i0-expand{c}"] for c in range(lats.CHILDREN)]
    assert all(e.parents == ("root",) and e.prompt_len == path for e in expands)
    for c, expand in enumerate(expands):
        evaluation = by_id[f"i0-eval{c}"]
        assert evaluation.parents == (expand.call_id,)
        # the path, the child's output, its observation (>= MIN_TOKENS) and the instruction
        assert evaluation.prompt_len >= path + expand.output_len + lats.MIN_TOKENS + \
            lats_stop.EVAL_TOKENS
    reflect = by_id["i0-reflect"]
    assert reflect.parents == tuple(f"i0-eval{c}" for c in range(lats.CHILDREN))
    chosen = reflect.prompt_len - path - lats_stop.REFLECT_TOKENS
    assert by_id["i1-expand0"].prompt_len == path + chosen  # one level down
    assert by_id["i1-expand0"].parents == ("i0-reflect",)


def test_depth_never_passes_the_limit():
    """Expansion prompts grow with depth and reset when the search backtracks: at most
    MAX_DEPTH - 1 growths in a row."""
    for program in lats_stop.generate(20, seed=3, rate=1.0).programs:
        prompts = [c.prompt_len for c in program.calls if c.call_id.endswith("-expand0")]
        run = longest = 0
        for before, after in zip(prompts, prompts[1:]):
            run = run + 1 if after > before else 0
            longest = max(longest, run)
        assert longest <= lats_stop.MAX_DEPTH - 1


def test_early_stop_distribution_mean():
    """min(Geometric(p), 50): mean (1 - (1 - p)^50) / p = 14.46, sd about 13, so the mean of
    2,000 draws is within 4 x 13 / sqrt(2000) = 1.2 of it."""
    assert lats_stop.mean_iterations() == pytest.approx(14.4598, abs=1e-4)
    assert 1 + 11 * lats_stop.mean_iterations() == pytest.approx(160.06, abs=0.01)
    trace = lats_stop.generate(2000, seed=7, rate=1.0)
    iterations = [lats_stop.iterations_of(len(p.calls)) for p in trace.programs]
    assert abs(statistics.fmean(iterations) - lats_stop.mean_iterations()) < 1.2
    assert min(iterations) >= 1 and max(iterations) == lats_stop.MAX_ITERATIONS


def test_old_lats_trace_is_unchanged():
    """`lats` keeps its fixed 14-15 iterations (the figures measured on it)."""
    trace = lats.generate(3, seed=0, rate=1.0)
    assert [len(p.calls) for p in trace.programs] == [166, 166, 155]


def test_bad_arguments():
    with pytest.raises(ValueError, match="^num_programs:"):
        lats_stop.generate(0, seed=0, rate=1.0)
    with pytest.raises(ValueError, match="^rate:"):
        lats_stop.generate(1, seed=0, rate=0.0)
