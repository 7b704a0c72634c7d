from bench.studies.scheduler_cost import TRAINED_PROGRAMS, measure, trained
from scheduler.policies import make_policy


def test_gittins_is_measured_with_its_index_tables_in_use():
    policy = trained(make_policy("gittins"))
    assert policy.learner.num_samples() == TRAINED_PROGRAMS
    table = policy.learner.table((None, None))
    # sizes 16 / (1 - u): the hazard of a Pareto tail is highest at its start (16), so G is
    # highest from 16 on and falls far past it
    assert [table.level(a, 8) for a in (0.0, 20.0, 1000.0)] == [1, 0, 5]


def test_a_small_measurement_runs_every_policy_clean():
    for policy in ("atlas", "gittins"):
        result = measure(num_programs=10, running=8, waiting=16, steps=12, policy=policy)
        assert (result["policy"], result["running"], result["waiting"]) == (policy, 8, 16)
        assert result["median_ms"] > 0 and result["update_median_ms"] > 0
