"""The REPORT record of a `bench.studies.vs_vllm --record NAME` run (issue 40): the ratio's
median and every repeat's, each engine's tokens/s per repeat, its median TTFT P50 and peak
RSS, and (offline) how many requests' greedy ids agree."""

from __future__ import annotations

import statistics
from typing import Any, Sequence

from bench.report.records import ReportRow, ReportStudy
from bench.sim.metrics import percentile

NOTES = "bench/notes/2026-12-04-agentix-vs-vllm.md"
TARGET = 1.2  # the Agentix / vLLM tokens/s
ENGINES = ("agentix", "vllm")
Run = dict[str, Any]


def _engine_label(engine: str, vllm_version: str) -> str:
    return "Agentix" if engine == "agentix" else f"vLLM {vllm_version}"


def ratios(repeats: Sequence[dict[str, Run]]) -> list[float]:
    """agentix / vllm tokens/s of each repeat that ran both."""
    return [r["agentix"]["tokens_per_s"] / r["vllm"]["tokens_per_s"]
            for r in repeats if {"agentix", "vllm"} <= r.keys()]


def record_rows(done: Sequence[dict[str, Run]], workload: str, vllm_version: str,
                identical: int | None) -> tuple[ReportRow, ...]:
    """The rows of repeats `done` (each engine -> its run; both engines in every repeat)."""
    per_repeat = ratios(done)
    median = statistics.median(per_repeat)
    verdict = "met" if median >= TARGET else "missed"
    figure = "Agentix / vLLM output tokens/s (x)"
    rows = [ReportRow("ratio.median", workload, "-",
                      f"{figure}, median of {len(done)} alternating repeats", round(median, 3),
                      note=f"min {min(per_repeat):.2f}x / max {max(per_repeat):.2f}x; the issue's "
                           f"{TARGET}x is {verdict}")]
    rows += [ReportRow(f"ratio.repeat{i}", workload, "-", f"{figure}, repeat {i}",
                       round(ratio, 3)) for i, ratio in enumerate(per_repeat)]
    for engine in ENGINES:
        label = _engine_label(engine, vllm_version)
        runs = [r[engine] for r in done]
        rows += [ReportRow(f"tokens_per_s.{engine}.repeat{i}", workload, "-",
                           f"{label} output tokens/s, repeat {i}", round(run["tokens_per_s"], 1))
                 for i, run in enumerate(runs)]
        rows.append(ReportRow(f"ttft_p50.{engine}.median", workload, "-",
                              f"{label} TTFT P50 (s), median over repeats",
                              round(statistics.median(percentile(r["first_token_s"], 50)
                                                      for r in runs), 2)))
        rows.append(ReportRow(f"peak_rss_mb.{engine}.median", workload, "-",
                              f"{label} peak RSS of the process tree (MiB), median over repeats",
                              round(statistics.median(r["peak_tree_rss_mb"] for r in runs))))
    if identical is not None:
        rows.append(ReportRow("identical_greedy", workload, "-",
                              "requests with identical greedy token ids, repeat 0", identical,
                              note="summation order may differ; not a gate"))
    return tuple(rows)


def vs_vllm_study(name: str, command: str, commit: str, date: str, machine: str, serve: bool,
                  rows: tuple[ReportRow, ...]) -> ReportStudy:
    door = "through each engine's OpenAI door" if serve else "offline"
    return ReportStudy(name=name, title=f"Agentix vs vLLM, {door} (issue 40)", command=command,
                       commit=commit, date=date, machine=machine, notes=NOTES, rows=rows)
