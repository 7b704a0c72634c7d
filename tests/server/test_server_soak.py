"""Soak: 40 programs from 8 client threads, 300 calls in all, sequential and parallel, some
cancelled or aborted mid-stream, under KV-cache pressure with swapping. Every call ends
cleanly and nothing leaks: no blocks, no calls, no process-table records."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter

import grpc
import pytest
from grpc_helpers import assert_clean, collect, free_blocks, gen_request, start

from server import agentix_pb2 as pb
from server import agentix_pb2_grpc

THREADS, PROGRAMS, CALLS = 8, 40, 300


def plan_calls(rng: random.Random) -> list[list[int]]:
    """CALLS calls over PROGRAMS programs, each program a list of rounds (round size 1:
    a sequential call; 2-3: parallel branches)."""
    sizes = [CALLS // PROGRAMS + (i < CALLS % PROGRAMS) for i in range(PROGRAMS)]
    programs = []
    for size in sizes:
        rounds = []
        while size:
            n = min(size, rng.choice((1, 1, 2, 3)))
            rounds.append(n)
            size -= n
        programs.append(rounds)
    return programs


@pytest.mark.slow
def test_soak(tiny_llama_dir):
    server = start(tiny_llama_dir, preemption_mode="swap", num_host_blocks=64, max_num_seqs=16,
                   num_kv_blocks=40)
    rng = random.Random(0)
    programs = plan_calls(rng)
    outcomes: Counter[str] = Counter()
    errors: list[BaseException] = []
    lock = threading.Lock()
    started = time.monotonic()
    try:
        free = free_blocks(server)
        with grpc.insecure_channel(server.address) as channel:
            stub = agentix_pb2_grpc.AgentixStub(channel)

            def one_call(pid: str, seed: int) -> None:
                r = random.Random(seed)
                prompt = [r.randrange(3, 384) for _ in range(r.randint(2, 60))]
                fields = dict(max_tokens=r.randint(1, 16), ignore_eos=r.random() < 0.5)
                if r.random() < 0.3:
                    fields.update(temperature=0.8, top_p=0.9, seed=seed)
                call_id = f"c{seed}"
                stream = stub.Generate(gen_request(prompt, pid, call_id=call_id, **fields))
                action = r.random()
                if action < 0.05:
                    next(stream, None)
                    stream.cancel()
                    outcome = "cancelled"
                else:
                    if action < 0.10:
                        stub.Abort(pb.AbortRequest(call_id=call_id))
                    ids, text, final = collect(stream)
                    assert final.finish_reason in ("stop", "length", "abort")
                    assert final.usage.completion_tokens == len(ids)
                    assert final.usage.prompt_tokens == len(prompt)
                    assert final.text == text
                    if final.finish_reason != "abort":
                        assert len(ids) <= fields["max_tokens"]
                    outcome = final.finish_reason
                with lock:
                    outcomes[outcome] += 1

            def run_program(index: int) -> None:
                pid = stub.StartProgram(pb.StartProgramRequest(tenant=f"t{index % 3}")).program_id
                seed = index * 1000
                for size in programs[index]:
                    branches = [threading.Thread(target=guarded, args=(one_call, pid, seed + i))
                                for i in range(size)]
                    seed += size
                    for t in branches:
                        t.start()
                    for t in branches:
                        t.join()
                stub.EndProgram(pb.EndProgramRequest(program_id=pid))

            def guarded(fn, *args) -> None:
                try:
                    fn(*args)
                except BaseException as exc:  # reported by the main thread
                    with lock:
                        errors.append(exc)

            def client(thread: int) -> None:
                for index in range(thread, PROGRAMS, THREADS):
                    guarded(run_program, index)

            clients = [threading.Thread(target=client, args=(i,)) for i in range(THREADS)]
            for t in clients:
                t.start()
            for t in clients:
                t.join(timeout=150)
        assert not errors, errors[:3]
        assert sum(outcomes.values()) == CALLS, outcomes
        assert outcomes["cancelled"] + outcomes["abort"] > 0 and outcomes["length"] > 0
        assert_clean(server, free)
        assert server.engine_loop.call(lambda e: len(e.scheduler.table)) == 0
        swaps = server.engine_loop.call(lambda e: e.scheduler.num_swap_outs)
        print(f"outcomes {dict(outcomes)}, {swaps} swap-outs, "
              f"{time.monotonic() - started:.1f}s")
        assert time.monotonic() - started < 120
    finally:
        server.stop(grace=0)
