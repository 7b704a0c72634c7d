"""One hot tenant: a share of a trace's programs comes from one tenant whose every call starts
with the same long system prompt, so a placement that follows prefixes sees them all as one
(the imbalance case of the many-machines issue: `prefix_aware` and `pinned` can pile the
tenant onto one replica).

`hot_tenant(trace, fraction, prefix_len=HOT_PREFIX_TOKENS, seed=0)`: each program is the
tenant's with probability `fraction` (drawn in program order from its own stream, so the same
programs at every rate). A tenant's program gets the `prefix_key` HOT_KEY and `prefix_len`
min(`prefix_len`, its shortest prompt), in place of any shared prefix it had (the tenant's
system prompt comes first). Arrivals, calls and lengths are unchanged: the trace without the
transform is the control. Only the prefix marks the tenant (the simulator has no tenant
accounting). Deterministic.
"""

from __future__ import annotations

import random
from dataclasses import replace

from bench.sim.trace import Trace

HOT_KEY = "hot-tenant"
HOT_PREFIX_TOKENS = 4096  # the tenant's system prompt: tool schemas and instructions


def hot_tenant(trace: Trace, fraction: float, prefix_len: int = HOT_PREFIX_TOKENS,
               seed: int = 0) -> Trace:
    """`trace` with about `fraction` of its programs made the hot tenant's (module
    docstring); ValueError for a `fraction` outside (0, 1] or a `prefix_len` below 1."""
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction: must be in (0, 1], got {fraction}")
    if isinstance(prefix_len, bool) or not isinstance(prefix_len, int) or prefix_len < 1:
        raise ValueError(f"prefix_len: must be an int >= 1, got {prefix_len!r}")
    draw = random.Random(seed).random
    programs = []
    for program in trace.programs:
        if draw() < fraction:
            shortest = min(call.prompt_len for call in program.calls)
            program = replace(program, prefix_key=HOT_KEY, prefix_len=min(prefix_len, shortest))
        programs.append(program)
    return Trace(tuple(programs))
