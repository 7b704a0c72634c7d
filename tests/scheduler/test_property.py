"""Random programs, arrivals, tool delays, aborts, ends and expiries under every policy, both
KV memories (LRU, program-aware with retention, host offload and fetch) and every preemption
mode, with small pools: every call finishes or is aborted, `check_integrity()` holds after
every step, no block leaks on either tier, no process-table record outlives its program."""

from __future__ import annotations

from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from harness import Sim
from scheduler.policies import POLICIES
from scheduler.policies.gittins import GittinsPolicy


class EagerGittins(GittinsPolicy):
    """`gittins` with an index table from the first finished program on (the registered one
    waits for 16, more than a scenario has)."""

    def __init__(self) -> None:
        super().__init__(window=4, min_samples=1)


call_shape = st.tuples(st.integers(1, 12), st.integers(1, 12))  # prompt, output
program = st.fixed_dictionaries({
    "arrival": st.integers(0, 20),
    "calls": st.lists(st.lists(call_shape, min_size=1, max_size=3), min_size=1, max_size=3),
    "abort_at": st.none() | st.integers(0, 40),
    "end_early_at": st.none() | st.integers(0, 40),
    "tool_delay": st.integers(0, 6),  # steps between a group's end and the next group
    "tool_hint": st.none() | st.integers(0, 8),
})
scenario = st.fixed_dictionaries({
    "policy": st.sampled_from([*sorted(POLICIES), EagerGittins]),
    "mode": st.sampled_from(["recompute", "swap", "keep", "auto"]),
    "kv_memory": st.sampled_from(["lru", "program"]),
    "program_ttl": st.sampled_from([4.0, 1e6]),  # 4: idle programs expire mid-run
    "num_blocks": st.integers(8, 24),
    "max_num_seqs": st.integers(1, 6),
    "budget": st.integers(4, 32),
    "multistep": st.sampled_from([1, 3]),
    "programs": st.lists(program, min_size=1, max_size=5),
})


# Found by this test: a swapped call met an exhausted step budget and lost its host blocks.
SWAPPED_CALL_AT_EXHAUSTED_BUDGET = {
    "policy": "atlas", "mode": "swap", "num_blocks": 8, "max_num_seqs": 3, "budget": 6,
    "multistep": 1, "kv_memory": "lru", "program_ttl": 1e6,
    "programs": [
        {"arrival": 5, "calls": [[(1, 7)], [(1, 4), (9, 5), (7, 4)]], "abort_at": None,
         "end_early_at": 17, "tool_delay": 0, "tool_hint": None},
        {"arrival": 18, "calls": [[(1, 4), (5, 3), (6, 2)]], "abort_at": None,
         "end_early_at": None, "tool_delay": 0, "tool_hint": None},
        {"arrival": 0, "calls": [[(1, 12)], [(7, 7), (1, 5)]], "abort_at": None,
         "end_early_at": None, "tool_delay": 0, "tool_hint": None},
        {"arrival": 18, "calls": [[(1, 2), (1, 6)]], "abort_at": None, "end_early_at": None,
         "tool_delay": 0, "tool_hint": None},
    ],
}


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario)
@example(SWAPPED_CALL_AT_EXHAUSTED_BUDGET)
def test_random_programs_never_leak(s):
    sim = Sim(s["policy"], num_blocks=s["num_blocks"], block_size=4, num_host_blocks=12,
              prefix_caching=s["kv_memory"] == "program" or s["mode"] == "keep",
              max_num_seqs=s["max_num_seqs"], max_num_batched_tokens=s["budget"],
              preemption_mode=s["mode"], multistep=s["multistep"], quantum_base=6,
              num_queues=4, starvation_beta=2.0, bytes_per_block=1000,
              host_link_bandwidth=1e6, prefill_tokens_per_second=1e3,
              program_ttl=s["program_ttl"], kv_memory=s["kv_memory"],
              retention_budget=0.5, retention_prior_seconds=3.0)
    # pending[p] = parallel groups still to issue; a group starts `tool_delay` steps after
    # the last one ended. Calls of one program share a token stream, so they share prefixes.
    pending = {f"p{i}": list(p["calls"]) for i, p in enumerate(s["programs"])}
    live: dict[str, list[str]] = {}
    ready_at: dict[str, float] = {}
    ended: set[str] = set()
    issued = aborted = 0
    for _ in range(3000):
        t = sim.now
        for i, p in enumerate(s["programs"]):
            name = f"p{i}"
            if p["arrival"] == t:
                sim.start(name)
                live[name] = []
                ready_at[name] = t
            if name not in live or name in ended:
                continue
            if name not in sim.scheduler.table:  # expired while idle
                ended.add(name)
                continue
            if p["end_early_at"] is not None and t == p["arrival"] + p["end_early_at"]:
                _, calls = sim.scheduler.end_program(name, sim.now)
                aborted += len(calls)
                ended.add(name)
                continue
            running = [c for c in live[name] if c not in sim.completed and c in sim.scheduler.records]
            if p["abort_at"] is not None and t == p["arrival"] + p["abort_at"] and running:
                sim.scheduler.finish(sim.calls[running[0]], sim.now)
                aborted += 1
                running = running[1:]
            if running:
                ready_at[name] = t + 1 + p["tool_delay"]
            elif pending[name] and t >= ready_at[name]:
                group = pending[name].pop(0)
                for j, (prompt, output) in enumerate(group):
                    call_id = f"{name}-{issued}"
                    issued += 1
                    live[name].append(call_id)
                    sim.call(name, call_id, prompt_len=prompt, output_len=output,
                             thread_id=str(j), expected_tool_seconds=p["tool_hint"],
                             token_ids=[100 + (7 * i + k) % 50 for k in range(prompt)])
            elif not pending[name]:
                sim.scheduler.end_program(name, sim.now)
                ended.add(name)
        if len(ended) == len(s["programs"]) and not sim.scheduler.num_unfinished:
            break
        sim.step()
        sim.scheduler.check_integrity()
    else:
        raise AssertionError("the workload did not drain in 3000 steps")
    stats = sim.scheduler.stats()
    event(f"preempted: {stats['num_preemptions'] > 0}")
    event(f"kept: {stats['preemptions_keep'] > 0}")
    event(f"promoted: {stats['num_promotions'] > 0}")
    event(f"offloaded: {stats['offloaded_blocks'] > 0}")
    event(f"fetched: {stats['fetched_blocks'] > 0}")
    event(f"retention expired: {stats['retentions_expired'] > 0}")
    assert len(sim.completed) + aborted == issued
    assert sim.kv.num_free_blocks == sim.kv.pool.num_usable
    assert sim.kv.num_free_host_blocks == 12
    assert stats["retained_blocks"] == 0
    assert len(sim.scheduler.table) == 0
    assert not sim.scheduler.records and not sim.scheduler.calls
