import statistics

import pytest

from bench.sim.workloads import mapreduce


def test_deterministic_per_seed_with_exact_counts():
    trace = mapreduce.generate(6, seed=0, rate=1.0)
    assert trace == mapreduce.generate(6, seed=0, rate=1.0)
    assert [len(p.calls) for p in trace.programs] == [174, 31, 29, 54, 7, 40]
    assert [mapreduce.workers_of(p) for p in trace.programs] == [14, 2, 2, 4, 1, 3]
    assert mapreduce.generate(6, seed=1, rate=1.0) != trace


def test_plan_workers_reduce():
    program = mapreduce.generate(6, seed=0, rate=1.0).programs[4]  # a simple query
    assert program.prefix_key == mapreduce.PREFIX_KEY
    assert program.prefix_len == mapreduce.SYSTEM_TOKENS
    plan, *workers, reduce = program.calls
    assert plan.call_id == "plan" and plan.parents == () and plan.segment == 0
    assert [c.call_id for c in workers] == [f"w0-{j}" for j in range(5)]
    assert workers[0].parents == ("plan",) and workers[0].delay == 0
    for before, after in zip(workers, workers[1:]):
        assert after.parents == (before.call_id,) and after.delay > 0
        assert after.segment == 1
        assert after.prompt_len > before.prompt_len + before.output_len  # + the tool result
    assert reduce.parents == ("w0-4",) and reduce.segment == 0
    assert reduce.prompt_len == plan.prompt_len + plan.output_len + workers[-1].output_len + \
        mapreduce.REDUCE_TOKENS


def test_workers_per_program_follow_the_classes():
    """Workers are 1, 2-4 or 11-16; their mean is 0.3 + 0.5 x 3 + 0.2 x 13.5 = 4.5 with sd
    about 5, so the mean of 2,000 programs is within 4 x 5 / sqrt(2000) = 0.45 of it."""
    assert mapreduce.mean_workers() == pytest.approx(4.5)
    workers = [mapreduce.workers_of(p) for p in mapreduce.generate(2000, 2, 1.0).programs]
    assert set(workers) <= {1, 2, 3, 4, *range(11, 17)}
    assert abs(statistics.fmean(workers) - 4.5) < 0.45


def test_bad_arguments():
    with pytest.raises(ValueError, match="^num_programs:"):
        mapreduce.generate(0, seed=0, rate=1.0)
