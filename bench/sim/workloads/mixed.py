"""Mixed workload: ShareGPT, BFCL and LATS programs in equal parts, round robin (program i is of
workload i % 3), arrivals re-drawn from one Poisson process over the whole mix."""

from __future__ import annotations

from typing import Any

from bench.sim.trace import Trace
from bench.sim.workloads import bfcl, lats, sharegpt
from bench.sim.workloads.common import check_num_programs, load_tokenizer, with_arrivals

WORKLOAD = "mixed"


def generate(num_programs: int, seed: int, rate: float, *, tokenizer: Any = None, conversations: Any = None) -> Trace:
    """`num_programs` programs, deterministic per `seed`; each part is generated with the same
    seed. Program ids keep their workload's prefix (e.g. "bfcl-3"), so they stay unique."""
    check_num_programs(num_programs)
    tokenizer = load_tokenizer() if tokenizer is None else tokenizer
    counts = [len(range(k, num_programs, 3)) for k in range(3)]
    inf = float("inf")
    parts = [
        sharegpt.generate(counts[0], seed, inf, tokenizer=tokenizer, conversations=conversations).programs,
        bfcl.generate(counts[1], seed, inf, tokenizer=tokenizer).programs if counts[1] else (),
        lats.generate(counts[2], seed, inf).programs if counts[2] else (),
    ]
    programs = [parts[i % 3][i // 3] for i in range(num_programs)]
    return with_arrivals(programs, seed, rate)
