import pytest

from bench.analysis.calibration_check import comparison, format_comparison
from bench.sim.simulate import ProgramResult, SimResult


def test_comparison_reports_errors_against_the_real_run():
    def result(finish_a, finish_b):
        return SimResult("atlas", "p", "m", [ProgramResult("A", "w", 1.0, finish_a, 10, 2),
                                             ProgramResult("B", "w", 2.0, finish_b, 5, 1)],
                         call_finish={"A/0": 2.0, "A/1": finish_a, "B/0": finish_b},
                         call_start={"A/0": 1.0, "A/1": 2.0, "B/0": 2.0})

    c = comparison(result(5.0, 4.0), result(5.4, 3.0))
    assert [round(p["error_pct"], 6) for p in c["programs"]] == [10.0, -50.0]
    real_mean = (4.0 / 10 + 2.0 / 5) / 2
    sim_mean = (4.4 / 10 + 1.0 / 5) / 2
    assert c["mean_norm_latency"]["error_pct"] == pytest.approx(100 * (sim_mean / real_mean - 1))
    assert c["peak_active_calls"] == {"real": 2, "sim": 2}
    assert "mean normalized latency" in format_comparison(c)

