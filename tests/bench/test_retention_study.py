"""bench.studies.retention_study: the three memory settings replay one trace, and the table shows
each one's figures with its ratios to the `ttl` row."""

from __future__ import annotations

import pytest

from bench.sim.trace import Trace, TraceCall, TraceProgram
from bench.studies import retention_study


def tiny_trace(*_args) -> Trace:
    """Two programs of three chained calls with 2 s tool calls between them."""
    def program(i: int) -> TraceProgram:
        calls = (TraceCall("c0", 300, 20), TraceCall("c1", 340, 20, ("c0",), 2.0),
                 TraceCall("c2", 380, 20, ("c1",), 2.0))
        return TraceProgram(f"p{i}", 0.5 * i, calls, "tiny")
    return Trace((program(0), program(1)))


def test_every_variant_replays_the_same_trace_with_its_own_settings(monkeypatch):
    monkeypatch.setattr(retention_study, "generate_trace", tiny_trace)
    rows = retention_study.compare("tiny", 1.0, 2, 0, "atlas", {})
    assert list(rows) == ["ttl", "learnt", "learnt+prefetch"]
    # A roomy device: nothing is evicted, so every rule gives the same run.
    assert rows["ttl"]["prefill"] == rows["learnt"]["prefill"] == \
        rows["learnt+prefetch"]["prefill"]
    # Each finished call's KV is retained (a program's last one until the driver ends it).
    assert all(row["offloaded_blocks"] == 0 and row["retentions"] == 6 for row in rows.values())


def test_the_table_gives_ratios_to_the_ttl_row():
    base = dict(mean=0.2, p99=0.4, ttft_p99=2.0, prefill=1000.0, retentions=10.0,
                retentions_expired=2.0, offloaded_blocks=5.0, fetched_blocks=4.0,
                prefetched_blocks=0.0)
    rows = {"ttl": base, "learnt": {**base, "mean": 0.1, "prefill": 500.0,
                                    "prefetched_blocks": 3.0}}
    lines = retention_study.table(rows).splitlines()
    assert lines[2] == ("| ttl | 0.2000 (1.000) | 0.4000 (1.000) | 2.00 (1.000) | 1000 (1.000) "
                        "| 10 / 2 | 5 / 4 / 0 |")
    assert lines[3] == ("| learnt | 0.1000 (0.500) | 0.4000 (1.000) | 2.00 (1.000) | "
                        "500 (0.500) | 10 / 2 | 5 / 4 / 3 |")


def test_flags_parse():
    with pytest.raises(SystemExit):
        retention_study.main(["--workload", "bfcl"])  # --rate and --programs are required
