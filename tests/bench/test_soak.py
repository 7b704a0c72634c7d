"""The serving stack's soak (bench/studies/soak.py) for 30 seconds: gRPC clients through the router
and HTTP clients on the replicas, cancels, aborts and dropped streams, a replica failover
every 10 s and a failing executor step in every 150. Every call ends with an expected
status, memory does not climb, and both replicas end with no call, block or record left.
(The 30-minute run's figures are in bench/notes/2026-12-01-hardening.md, "Soak".)"""

from __future__ import annotations

import pytest

from bench.studies.soak import run_soak


@pytest.mark.slow
def test_a_30_second_soak_ends_clean(tiny_llama_dir):
    report = run_soak(tiny_llama_dir, seconds=30, fail_every=150, failover_every=10,
                      program_ttl=3, sample_seconds=2)
    summary = report.to_dict()
    assert not report.errors, report.errors
    assert summary["failovers"] >= 2 and summary["injected_failures"] >= 1
    outcomes = report.outcomes
    for kind in ("length", "error", "cancelled", "http:200"):
        assert outcomes[kind] > 0, (kind, dict(outcomes))
    # Flat: the second half's peak stays within 100 MB and 10% of Python objects of the first's.
    assert summary["rss_mb_max_second_half"] <= summary["rss_mb_max_first_half"] + 100
    assert summary["heap_blocks_max_second_half"] <= \
        1.1 * summary["heap_blocks_max_first_half"]
