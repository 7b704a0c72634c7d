"""bench.studies.tp_bench's cost-model check: the TP=2 prediction without and with the collectives'
term, from a measured all-reduce latency and bus bandwidth (no engine run)."""

from __future__ import annotations

import json

import pytest

from bench.studies.tp_bench import MODEL, cost_model_check

FIT = {"flops_rate": 1e11, "byte_rate": 1e11, "step_overhead": 0.01, "schedule_overhead": 0.0}


def test_the_collectives_term_adds_eighteen_all_reduces_of_the_steps_activations(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(MODEL))
    samples = [[[[1, 100]] * 4, True, 0.05], [[[64, 64]], True, 0.08]]  # 4 decodes; a prefill
    allreduce = {"latency": 1e-3, "bus_bandwidth": 1e9}
    without = cost_model_check(str(tmp_path), FIT, samples)
    with_term = cost_model_check(str(tmp_path), FIT, samples, allreduce)
    collectives = MODEL["num_hidden_layers"] * 2 + 2
    for tokens, before, after in zip((4, 64), without["steps"], with_term["steps"]):
        assert (before["tokens"], after["tokens"]) == (tokens, tokens)
        activations = tokens * MODEL["hidden_size"] * 4  # float32
        assert after["predicted"] - before["predicted"] == pytest.approx(
            collectives * (1e-3 + activations / 1e9))
    assert with_term["mean_rel_error"] > without["mean_rel_error"]
