from dataclasses import dataclass

import pytest

from bench.sim.metrics import compute_metrics, metrics_by_workload, normalized_latency, percentile


@dataclass
class Rec:
    arrival: float
    finish: float
    generated_tokens: int


def test_normalized_latency_is_response_time_per_token():
    assert normalized_latency(Rec(2.0, 12.0, 5)) == 2.0
    with pytest.raises(ValueError, match="generated_tokens"):
        normalized_latency(Rec(0.0, 1.0, 0))


def test_percentile_interpolates_between_closest_ranks():
    values = [4.0, 1.0, 3.0, 2.0, 5.0]  # sorted 1..5, rank = 4 * q / 100
    assert percentile(values, 0) == 1.0
    assert percentile(values, 50) == 3.0
    assert percentile(values, 95) == pytest.approx(4.8)  # rank 3.8
    assert percentile(values, 99) == pytest.approx(4.96)  # rank 3.96
    assert percentile(values, 100) == 5.0
    assert percentile([7.0], 99) == 7.0
    with pytest.raises(ValueError, match="q"):
        percentile(values, 101)
    with pytest.raises(ValueError, match="values"):
        percentile([], 50)


def test_metrics_on_a_hand_computed_run():
    # latencies: (10-0)/10 = 1.0, (7-1)/2 = 3.0, (22-2)/10 = 2.0, (6-4)/4 = 0.5
    records = [Rec(0.0, 10.0, 10), Rec(1.0, 7.0, 2), Rec(2.0, 22.0, 10), Rec(4.0, 6.0, 4)]
    m = compute_metrics(records)
    assert m.programs_completed == 4
    assert m.mean_norm_latency == pytest.approx(6.5 / 4)
    # sorted 0.5, 1.0, 2.0, 3.0; P50 at rank 1.5, P95 at 2.85, P99 at 2.97
    assert m.p50_norm_latency == pytest.approx(1.5)
    assert m.p95_norm_latency == pytest.approx(2.85)
    assert m.p99_norm_latency == pytest.approx(2.97)
    assert m.makespan_s == 22.0
    assert m.generated_tokens == 26
    assert m.throughput_tokens_per_s == pytest.approx(26 / 22)


def test_parallel_program_divides_critical_path_by_all_tokens():
    # three branches of 4 tokens each run side by side; the last finishes at 6 s
    (rec,) = [Rec(0.0, 6.0, 12)]
    assert compute_metrics([rec]).mean_norm_latency == 0.5


def test_empty_run_is_all_zeros():
    m = compute_metrics([])
    assert m.programs_completed == 0 and m.throughput_tokens_per_s == 0.0
    assert set(m.to_dict()) >= {"mean_norm_latency", "p50_norm_latency", "p95_norm_latency",
                                "p99_norm_latency", "throughput_tokens_per_s",
                                "programs_completed", "makespan_s"}


@dataclass
class WRec(Rec):
    workload: str


def test_metrics_by_workload_groups_in_first_seen_order():
    records = [WRec(0.0, 10.0, 10, "lats"), WRec(1.0, 7.0, 2, "bfcl"), WRec(2.0, 22.0, 10, "lats")]
    by = metrics_by_workload(records)
    assert list(by) == ["lats", "bfcl"]
    assert by["lats"].mean_norm_latency == pytest.approx((1.0 + 2.0) / 2)
    assert by["bfcl"].mean_norm_latency == pytest.approx(3.0)
    assert by["lats"].programs_completed == 2 and by["bfcl"].generated_tokens == 2
