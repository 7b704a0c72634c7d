"""Program-level metrics of a run (the paper's): normalized latency, its tail, throughput.

- normalized latency of a program = (finish - arrival) / generated tokens, where `finish` is
  when its last call finished (for a parallel program: the end of its critical path) and the
  tokens are those of all its calls (all threads);
- mean, P50, P95, P99 of it over programs. Percentiles use linear interpolation between the
  closest ranks (numpy's default "linear" method, Hyndman-Fan type 7): for sorted values
  v[0..n-1], P_q is at rank (n - 1) * q / 100;
- makespan = last finish - first arrival; throughput = all generated tokens / makespan.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Protocol, Sequence


class ProgramRecord(Protocol):
    arrival: float
    finish: float
    generated_tokens: int


class WorkloadRecord(ProgramRecord, Protocol):
    workload: str


@dataclass(frozen=True)
class Metrics:
    programs_completed: int
    mean_norm_latency: float
    p50_norm_latency: float
    p95_norm_latency: float
    p99_norm_latency: float
    throughput_tokens_per_s: float
    makespan_s: float
    generated_tokens: int

    def to_dict(self) -> dict[str, float | int]:
        return asdict(self)


def normalized_latency(record: ProgramRecord) -> float:
    if record.generated_tokens <= 0:
        raise ValueError(f"generated_tokens must be positive, got {record.generated_tokens}")
    return (record.finish - record.arrival) / record.generated_tokens


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) by linear interpolation between closest ranks."""
    if not values:
        raise ValueError("values must not be empty")
    if not 0 <= q <= 100:
        raise ValueError(f"q must be in [0, 100], got {q}")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    lo = math.floor(rank)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (rank - lo)


def compute_metrics(records: Sequence[ProgramRecord]) -> Metrics:
    """Metrics over completed programs; an empty run gives zeros (nothing completed)."""
    if not records:
        return Metrics(0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0)
    latencies = [normalized_latency(r) for r in records]
    tokens = sum(r.generated_tokens for r in records)
    makespan = max(r.finish for r in records) - min(r.arrival for r in records)
    return Metrics(
        programs_completed=len(records),
        mean_norm_latency=sum(latencies) / len(latencies),
        p50_norm_latency=percentile(latencies, 50),
        p95_norm_latency=percentile(latencies, 95),
        p99_norm_latency=percentile(latencies, 99),
        throughput_tokens_per_s=tokens / makespan if makespan > 0 else 0.0,
        makespan_s=makespan,
        generated_tokens=tokens,
    )


def metrics_by_workload(records: Sequence[WorkloadRecord]) -> dict[str, Metrics]:
    """`compute_metrics` over each workload's programs, in first-seen order: which kind of
    program a policy helps or hurts inside a mixed run."""
    groups: dict[str, list[WorkloadRecord]] = {}
    for record in records:
        groups.setdefault(record.workload, []).append(record)
    return {name: compute_metrics(group) for name, group in groups.items()}
