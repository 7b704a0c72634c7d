"""The scheduler's own cost: median time of one scheduling decision with many running and
waiting calls and a large process table, and how it grows with the number of programs.

    python -m bench.studies.scheduler_cost [--running 512] [--waiting 4096]
                                           [--programs 1000,10000,100000]
                                           [--kv-memory lru,program] [--policies atlas,gittins]

No model: SimCalls advance by one token per step (token-mode service), with a block pool big
enough for the running calls but not for the waiting ones, so every decision walks the
running calls, checks admission, and may preempt (at most 4 per round). `gittins` runs with a
learner that has seen `TRAINED_PROGRAMS` finished programs (heavy-tailed sizes), so its index
tables are in use. Besides the decision (`schedule`), the table gives the time of applying
a step's outcome (`update`: where the policy charges service and moves calls between levels).
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Sequence

from bench.sim.sim_call import SimCall
from kvcache.manager import KVCacheManager
from scheduler.config import SchedulerConfig
from scheduler.policies import Policy, make_policy
from scheduler.process_table import ProgramRecord
from scheduler.scheduler import Scheduler

TRAINED_PROGRAMS = 1000


def trained(policy: Policy) -> Policy:
    """`policy` after seeing `TRAINED_PROGRAMS` finished programs: Pareto sizes from 16 to
    16,000 tokens of service (16 / (1 - u) for u = 0, 0.001, ... 0.999, in a scrambled
    order), 64 tokens generated each (only a learning policy keeps anything)."""
    for i in range(TRAINED_PROGRAMS):
        u = (i * 7919 % TRAINED_PROGRAMS) / TRAINED_PROGRAMS
        record = ProgramRecord(f"done-{i}", None, 0.0, service=16.0 / (1 - u),
                               generated_tokens=64)
        policy.program_ended(record, 0.0)
    return policy


def measure(num_programs: int, running: int, waiting: int, steps: int, policy: str,
            kv_memory: str = "program") -> dict:
    """Median and p90 seconds of `Scheduler.schedule` over `steps` decisions, with prefix
    caching, a host tier and the given KV memory."""
    block_size, prompt = 16, 64
    kv = KVCacheManager(num_blocks=running * 16, block_size=block_size,
                        num_host_blocks=running * 16, enable_prefix_caching=True)
    scheduler = Scheduler(SchedulerConfig(max_num_seqs=running, max_num_batched_tokens=
                                          running * prompt + running, service_mode="tokens",
                                          quantum_base=64, program_ttl=1e9,
                                          kv_memory=kv_memory, max_programs=num_programs,
                                          max_programs_per_tenant=num_programs,
                                          preemption_mode="recompute",
                                          ttft_slo_tokens=None), kv,  # as measured
                          trained(make_policy(policy)))
    for p in range(num_programs):
        scheduler.start_program(0.0, f"p{p}")
    calls = []
    for i in range(running + waiting):
        call = SimCall(f"c{i}", prompt, 10_000, 0.0, i)
        scheduler.add(call, 0.0, f"p{i % num_programs}")
        calls.append(call)
    now, times, update_times = 0.0, [], []
    for step in range(steps + 1):
        started = time.perf_counter()
        plan = scheduler.schedule(now)
        scheduled = time.perf_counter()
        now += 1.0
        scheduler.update(plan, [7 if c.samples else None for c in plan.chunks], now)
        if step > 0:  # the first decision admits everything: not a steady state
            times.append(scheduled - started)
            update_times.append(time.perf_counter() - scheduled)
    scheduler.check_integrity()
    return {"policy": policy, "kv_memory": kv_memory, "programs": num_programs,
            "running": len(scheduler.running), "waiting": scheduler.num_waiting,
            "median_ms": statistics.median(times) * 1e3,
            "p90_ms": statistics.quantiles(times, n=10)[-1] * 1e3,
            "update_median_ms": statistics.median(update_times) * 1e3,
            "preemptions": scheduler.num_preemptions}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--running", type=int, default=512)
    parser.add_argument("--waiting", type=int, default=4096)
    parser.add_argument("--programs", default="1000,10000,100000")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--policies", default="atlas",
                        help="policies to measure side by side")
    parser.add_argument("--kv-memory", default="lru,program",
                        help="KV memories to measure side by side")
    args = parser.parse_args(argv)
    print("| policy | kv memory | programs | running | waiting | median ms | p90 ms | "
          "update median ms | preemptions |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for n in (int(x) for x in args.programs.split(",")):
        for memory in args.kv_memory.split(","):
            for policy in args.policies.split(","):
                r = measure(n, args.running, args.waiting, args.steps, policy, memory)
                print(f"| {policy} | {memory} | {r['programs']} | {r['running']} | "
                      f"{r['waiting']} | {r['median_ms']:.3f} | {r['p90_ms']:.3f} | "
                      f"{r['update_median_ms']:.3f} | {r['preemptions']} |", flush=True)


if __name__ == "__main__":
    main()
