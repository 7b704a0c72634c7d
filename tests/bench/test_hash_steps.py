"""The hash-steps study counts what it says: history chains save chain steps, never a
blake2b hash or a simulated figure."""

from bench.sim.workloads import lats
from bench.studies.hash_steps import count_steps


def test_history_chains_save_chain_steps_and_change_no_figure():
    trace = lats.generate(4, seed=2, rate=4.0)
    kept = count_steps(trace, "atlas", keep_history=True)
    none_kept = count_steps(trace, "atlas", keep_history=False)
    assert 0 < kept["chain_steps"] < none_kept["chain_steps"]
    assert kept["blake2b_hashes"] == none_kept["blake2b_hashes"] > 0
    assert kept["mean_norm_latency"] == none_kept["mean_norm_latency"] > 0
