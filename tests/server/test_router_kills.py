"""Random kills under a mixed load: three `agentix serve` replicas (two running calls each,
the rest waiting) behind a round_robin router serve eight agent programs at once (sequential
calls, parallel calls, streams; 1-4 calls each of 2-96 tokens, with tool time before each),
while a killer SIGKILLs two of the three, each a random live one at a random moment once it
has a call in flight (victims and delays drawn from a seeded random.Random). Every call ends
with its exact token count (the client re-sending what was cut), the router counts each
program's calls and tokens once and holds no call, the survivor ends with no call and no
block in use, and the router holds the killed replicas unhealthy."""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass

import grpc
import pytest
from router_helpers import TOKEN, ReplicaProcess, router_over, wait_until

from scheduler.placement import make_placement
from server import agentix_pb2 as pb
from server import agentix_pb2_grpc
from server.client import RETRY_BACKOFF_SECONDS, AgentixClient, AgentixError, Program

REPLICAS = 3
KILLS = 2  # never all three: one survives
RETRIES = 4  # a call may be cut by both kills
RPC_TIMEOUT = 60.0
LOAD_TIMEOUT = 45.0
SEEDS = [11]  # one run costs ~35 s on two cores, most of it three replicas starting


@dataclass(frozen=True)
class Shape:
    """One program: how it issues its calls ("sequential", "parallel": one generate_many,
    "stream"), its prompts' length, each call's max_tokens (ignore_eos: exact lengths), and
    its tool seconds before each call (before the batch, for "parallel")."""

    kind: str
    prompt_len: int
    max_tokens: tuple[int, ...]
    tool_seconds: float


PROGRAMS = (
    Shape("sequential", 3, (24, 2, 96, 9), 0.5),
    Shape("sequential", 40, (64,), 1.5),
    Shape("sequential", 12, (20, 80), 0.9),
    Shape("parallel", 7, (48, 48, 48), 1.2),
    Shape("parallel", 25, (96, 96), 0.3),
    Shape("stream", 4, (96, 5, 40), 0.6),
    Shape("stream", 31, (2, 72), 1.1),
    Shape("stream", 18, (16, 96, 8, 32), 0.7),
)


def prompt(program: int, call: int, length: int) -> list[int]:
    """BOS, then `length - 1` word ids (3..382) that differ from program to program."""
    return [1] + [3 + (program * 37 + call * 11 + k) % 380 for k in range(length - 1)]


def streamed(prog: Program, ids: list[int], call_id: str, max_tokens: int) -> tuple[int, ...]:
    """One streamed call, re-sent with the same id when cut (UNAVAILABLE), as `generate`'s
    retries do; its deltas must add up to the completion."""
    for attempt in range(RETRIES + 1):
        try:
            *deltas, completion = prog.stream(ids, call_id=call_id, max_tokens=max_tokens,
                                              ignore_eos=True)
        except AgentixError as exc:
            if exc.code != grpc.StatusCode.UNAVAILABLE or attempt == RETRIES:
                raise
            time.sleep(RETRY_BACKOFF_SECONDS * (attempt + 1))
            continue
        assert completion.token_ids == tuple(t for d in deltas for t in d.token_ids)
        return completion.token_ids
    raise AssertionError("unreachable")


def run_program(address: str, index: int, shape: Shape, errors: list) -> None:
    """The program `shape` as p{index}; asserts every call's length and the router's
    counts of the program's calls and tokens; appends any failure to `errors`."""
    try:
        with AgentixClient(address, retry_unavailable=RETRIES, timeout=RPC_TIMEOUT) as client, \
                client.program(program_id=f"p{index}") as prog:
            prompts = [prompt(index, c, shape.prompt_len) for c in range(len(shape.max_tokens))]
            if shape.kind == "parallel":
                time.sleep(shape.tool_seconds)
                outs = [o.token_ids for o in prog.generate_many(
                    prompts, max_tokens=shape.max_tokens[0], ignore_eos=True)]
            else:
                outs = []
                for c, (ids, max_tokens) in enumerate(zip(prompts, shape.max_tokens)):
                    time.sleep(shape.tool_seconds)  # the program's tool runs
                    if shape.kind == "stream":
                        outs.append(streamed(prog, ids, f"p{index}-c{c}", max_tokens))
                    else:
                        outs.append(prog.generate(ids, max_tokens=max_tokens,
                                                  ignore_eos=True).token_ids)
            assert [len(o) for o in outs] == list(shape.max_tokens), prog.program_id
            info = prog.info()  # cut calls are not counted; their re-sent ones are, once
            assert (info["num_calls"], info["generated_tokens"]) == \
                (len(shape.max_tokens), sum(shape.max_tokens)), (prog.program_id, info)
    except Exception as exc:  # reported by the test
        errors.append(exc)


def kill_randomly(rng: random.Random, procs: list[ReplicaProcess], router, killed: list,
                  errors: list) -> None:
    """KILLS times: wait a random 0.3-1 s, pick a random live replica, wait until it has a
    call in flight, SIGKILL it (appending its index to `killed`)."""
    core = router.router
    try:
        for _ in range(KILLS):
            time.sleep(rng.uniform(0.3, 1.0))  # a random moment, not a synchronization
            victim = rng.choice([i for i in range(REPLICAS) if i not in killed])
            wait_until(lambda v=victim: router.call(lambda: bool(core.replicas[v].attempts)),
                       timeout=20, what=f"a call in flight on replica {victim}")
            procs[victim].kill()
            killed.append(victim)
    except Exception as exc:  # reported by the test
        errors.append(exc)


def idle(address: str) -> bool:
    """No call running or waiting and no KV block in use on the replica at `address`."""
    with grpc.insecure_channel(address) as channel:
        stats = agentix_pb2_grpc.AgentixStub(channel).EngineStats(pb.EngineStatsRequest(),
                                                                   timeout=5)
    return (stats.calls_running, stats.calls_waiting, stats.kv_blocks_used) == (0, 0, 0)


@pytest.mark.slow
@pytest.mark.parametrize("seed", SEEDS)
def test_random_kills_under_a_mixed_load(tiny_llama_dir, tmp_path, seed):
    token_file = tmp_path / "router-token"
    token_file.write_text(TOKEN + "\n")
    procs = [ReplicaProcess(tiny_llama_dir, token_file, "--max-num-seqs", "2")
             for _ in range(REPLICAS)]
    router = None
    try:
        addresses = [p.wait_ready(timeout=120) for p in procs]  # three start on two cores
        router = router_over(addresses, make_placement("round_robin"))
        core = router.router
        wait_until(lambda: router.call(lambda: all(r.healthy for r in core.replicas)),
                   timeout=30, what="every replica serving")
        errors: list = []
        killed: list[int] = []
        threads = [threading.Thread(target=run_program, args=(router.address, i, shape, errors),
                                    daemon=True) for i, shape in enumerate(PROGRAMS)]
        threads.append(threading.Thread(
            target=kill_randomly, args=(random.Random(seed), procs, router, killed, errors),
            daemon=True))
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + LOAD_TIMEOUT
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        assert not any(t.is_alive() for t in threads), "a program (or the killer) never ended"
        assert not errors, errors
        assert len(killed) == KILLS

        wait_until(lambda: router.call(lambda: not any(core.replicas[i].healthy
                                                       for i in killed)),
                   timeout=10, what="the killed replicas unhealthy")
        assert router.call(lambda: (len(core.calls), [len(r.attempts) for r in core.replicas])) \
            == (0, [0] * REPLICAS)  # the router holds no call
        assert router.call(lambda: core.retried + core.lost_mid_stream) >= 1  # kills cut calls
        for i in sorted(set(range(REPLICAS)) - set(killed)):
            wait_until(lambda a=addresses[i]: idle(a), timeout=30,
                       what=f"survivor {i} idle")
    finally:
        if router is not None:
            router.stop(grace=0)
        for proc in procs:
            proc.stop()
