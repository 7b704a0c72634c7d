import hashlib

import pytest

from bench.sim.trace import save_trace
from bench.sim.workloads import coding, coding_swe


def test_deterministic_per_seed_with_exact_counts():
    trace, sessions = coding_swe.generate_with_stats(5, seed=0, rate=1.0)
    assert trace == coding_swe.generate(5, seed=0, rate=1.0)
    assert [s.turns for s in sessions] == [23, 48, 26, 17, 21]
    assert [len(p.calls) for p in trace.programs] == [23, 48, 26, 17, 21]  # no subagent
    assert [s.final_context for s in sessions] == [38363, 73395, 40870, 41756, 31168]
    assert {p.workload for p in trace.programs} == {"coding_swe"}


def test_turns_contexts_and_tool_times_match_the_issue():
    trace, sessions = coding_swe.generate_with_stats(300, seed=1, rate=1.0)
    assert all(10 <= s.turns <= 60 and s.subagent_turns == 0 for s in sessions)
    assert all(10_000 < s.final_context < 131_072 for s in sessions)
    delays = [c.delay for p in trace.programs for c in p.calls if c.delay > 0]
    assert 0.75 < sum(d < 1 for d in delays) / len(delays) < 0.85  # ~80% within a second
    assert max(delays) > 120  # a tail to minutes
    assert all(coding_swe.MIN_S <= d <= coding_swe.MAX_S for d in delays)


def test_coding_is_unchanged_by_the_shape(tmp_path):
    """`coding` draws exactly as before `Shape` (its traces in bench/notes/ reproduce)."""
    save_trace(coding.generate(30, seed=3, rate=0.5), tmp_path / "t.json")
    digest = hashlib.md5((tmp_path / "t.json").read_bytes()).hexdigest()
    assert digest == "cf97b412c01f3961a44c6c9f868173f6"  # the trace saved before `Shape`


@pytest.mark.parametrize("fields, name", [
    (dict(slow_median=0), "slow_median"), (dict(minimum=-1), "minimum"),
    (dict(fast_share=1.5), "fast_share"),
])
def test_bad_tool_delays_name_the_field(fields, name):
    args = dict(slow_median=1.0, slow_sigma=1.0, minimum=0.0, maximum=10.0) | fields
    with pytest.raises(ValueError, match=f"^{name}:"):
        coding.ToolDelays(**args)


def test_bad_shape_names_the_field():
    with pytest.raises(ValueError, match="^turns_median:"):
        coding.Shape("x", 5, 0.5, 10, 60, 1000.0, coding_swe.SWE.tool_delays, 0.0)
    with pytest.raises(ValueError, match="^subagent_share:"):
        coding.Shape("x", 25, 0.5, 10, 60, 1000.0, coding_swe.SWE.tool_delays, 2.0)
