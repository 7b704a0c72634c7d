"""How many chain-hash steps and blake2b hashes one simulated run makes: the KV manager's
per-call bookkeeping that the scheduler's history chains save.

    python -m bench.studies.hash_steps [--workload mixed] [--programs 300] [--rate 0.5]
        [--seed 0] [--policy atlas] [--no-history]

Counts calls of `KVCacheManager._append_hash` (one per block whose chain hash a call's list
gains, from the memo or not) and of `hash_block` (a blake2b), and the CPU seconds of
`simulate()`; prints one JSON line with the run's mean normalized latency beside them.
`--no-history` bounds the scheduler's HistoryChains to 0 tokens (none kept: the rule before
they existed); the simulated figures must not change.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from unittest import mock

import kvcache.manager
from bench.sim.metrics import compute_metrics
from bench.sim.simulate import simulate
from bench.sim.trace import Trace
from bench.support.sim_run_arguments import add_sim_run_arguments, sim_run_trace
from scheduler.history_chains import HistoryChains


@contextmanager
def without_history_chains() -> Iterator[None]:
    """Inside it, every new Scheduler keeps no history chains (bounded to 0 tokens)."""
    with mock.patch("scheduler.scheduler.HistoryChains",
                    lambda max_tokens, block_size: HistoryChains(0, block_size)):
        yield


def count_steps(trace: Trace, policy: str, keep_history: bool) -> dict[str, float]:
    """One simulated run of `trace` under `policy`, instrumented: chain steps, blake2b
    hashes, simulate() CPU s."""
    counts: Counter[str] = Counter()
    append_hash = kvcache.manager.KVCacheManager._append_hash
    hash_block = kvcache.manager.hash_block

    def counted_append(self, hashes, tokens):
        counts["chain_steps"] += 1
        return append_hash(self, hashes, tokens)

    def counted_hash(parent, tokens):
        counts["blake2b_hashes"] += 1
        return hash_block(parent, tokens)

    with ExitStack() as stack:
        stack.enter_context(mock.patch.object(kvcache.manager.KVCacheManager, "_append_hash",
                                              counted_append))
        stack.enter_context(mock.patch.object(kvcache.manager, "hash_block", counted_hash))
        if not keep_history:
            stack.enter_context(without_history_chains())
        start = time.process_time()
        result = simulate(trace, policy)
        cpu = time.process_time() - start
    return {"chain_steps": counts["chain_steps"], "blake2b_hashes": counts["blake2b_hashes"],
            "simulate_cpu_seconds": round(cpu, 2),
            "mean_norm_latency": compute_metrics(result.programs).mean_norm_latency}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.studies.hash_steps",
                                     description=__doc__.splitlines()[0])
    add_sim_run_arguments(parser, programs=300)
    parser.add_argument("--no-history", action="store_true",
                        help="keep no history chains (the rule before them)")
    args = parser.parse_args(argv)
    print(json.dumps({"workload": args.workload, "programs": args.programs,
                      "history": not args.no_history,
                      **count_steps(sim_run_trace(args), args.policy, not args.no_history)}))


if __name__ == "__main__":
    main()
