"""The router under chaos, each case bounded in time: a replica that hangs while its health
still answers, a replica frozen by SIGSTOP and thawed by SIGCONT, a tensor-parallel replica
whose worker is SIGKILLed, the router itself stopped while clients stream, and a replica lost
while a request's n choices stream through the router's OpenAI door. Every program finishes
(its client retrying what was cut), or ends with a clear retryable status, and no call is left
on any replica."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time

import grpc
import pytest
from grpc_helpers import slow_down, start, wait_idle
from router_helpers import (TOKEN, Partition, ReplicaProcess, in_process_replicas, router_over,
                            wait_until)
from test_http_errors import SSE

from scheduler.placement import make_placement
from server import agentix_pb2 as pb
from server import agentix_pb2_grpc
from server.client import AgentixClient


def run_programs(address: str, count: int, calls: int, max_tokens: int) -> list:
    """Run `count` programs of `calls` calls each at once (the client retrying UNAVAILABLE
    3 times); returns the errors."""
    errors: list = []

    def one(index: int) -> None:
        try:
            with AgentixClient(address, retry_unavailable=3) as client, \
                    client.program() as prog:
                for c in range(calls):
                    out = prog.generate([1, 5 + index, 6 + c], max_tokens=max_tokens,
                                        ignore_eos=True)
                    assert len(out.token_ids) == max_tokens
        except Exception as exc:  # reported by the caller
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    return errors


@contextlib.contextmanager
def replicas_behind_least_loaded(model_dir: str, **options):
    """Two in-process replicas (`options` for both) behind a least_loaded router; on
    leaving (the body done), both replicas must end idle, then everything stops."""
    with replicas_behind(model_dir, [options, options]) as both:
        yield both


@contextlib.contextmanager
def replicas_behind(model_dir: str, options: list[dict]):
    """One in-process replica per entry of `options` (its own) behind a least_loaded
    router; on leaving (the body done), every replica must end idle, then everything
    stops."""
    replicas = [start(model_dir, router_token=TOKEN, **each) for each in options]
    router = router_over(replicas, make_placement("least_loaded"))
    try:
        yield replicas, router
        for replica in replicas:
            wait_idle(replica, timeout=10)
    finally:
        router.stop(grace=0)
        for replica in replicas:
            replica.stop(grace=0)


def test_a_replica_that_hangs_with_its_health_answering_is_avoided(tiny_llama_dir):
    """Replica 0's engine thread blocks for 4 s while its gRPC health still answers: its
    stall detection (1 s) turns it NOT_SERVING, the router places new calls on replica 1
    meanwhile, and once the engine moves again every call finishes on one or the other."""
    with replicas_behind_least_loaded(tiny_llama_dir, health_stall_seconds=1.0) as (
            replicas, router):
        core = router.router
        hang = threading.Thread(target=lambda: replicas[0].engine_loop.call(
            lambda engine: time.sleep(4.0)))
        hang.start()
        # The engine thread is held: a call queued there now makes it "stalled with work".
        wait_until(lambda: not router.call(lambda: core.replicas[0].healthy), timeout=10,
                   what="replica 0 not serving")
        assert not run_programs(router.address, count=4, calls=2, max_tokens=4)
        hang.join(10)
        wait_until(lambda: router.call(lambda: core.replicas[0].healthy), timeout=10,
                   what="replica 0 serving again")


def test_a_tensor_parallel_replica_whose_worker_dies_is_left_out(tiny_llama_dir):
    """Replica 0 runs at TP=2; SIGKILL of its worker under load breaks its engine for good:
    its calls end UNAVAILABLE (retried on replica 1), its health turns NOT_SERVING within
    seconds and stays so, and every program finishes on replica 1."""
    with replicas_behind(tiny_llama_dir, [{"tensor_parallel_size": 2}, {}]) as (
            replicas, router):
        core = router.router
        [pid] = replicas[0].engine_loop.call(lambda engine: engine.executor.worker_pids)
        errors: list = []
        load = threading.Thread(target=lambda: errors.extend(
            run_programs(router.address, count=4, calls=3, max_tokens=24)))
        load.start()
        wait_until(lambda: router.call(lambda: bool(core.replicas[0].attempts)), timeout=30,
                   what="a call on replica 0")
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: not router.call(lambda: core.replicas[0].healthy), timeout=5,
                   what="replica 0 lost")
        load.join(120)
        assert not errors, errors
        tokens = replicas[1].engine_loop.call(lambda engine: engine.counters.generation_tokens)
        assert not run_programs(router.address, count=2, calls=2, max_tokens=4)
        assert replicas[1].engine_loop.call(
            lambda engine: engine.counters.generation_tokens) == tokens + 2 * 2 * 4
        assert not router.call(lambda: core.replicas[0].healthy)


@pytest.mark.slow
def test_sigstop_and_sigcont_of_a_replica_under_load(tiny_llama_dir, tmp_path):
    """A frozen replica answers nothing: after 3 health checks time out it is lost, its
    calls are cut and retried on the other one, every program finishes; thawed, it serves
    again and the router uses it."""
    token_file = tmp_path / "router-token"
    token_file.write_text(TOKEN + "\n")
    procs = [ReplicaProcess(tiny_llama_dir, token_file) for _ in range(2)]
    router = None
    try:
        addresses = [p.wait_ready() for p in procs]
        router = router_over(addresses, make_placement("round_robin"))
        core = router.router
        errors: list = []
        load = threading.Thread(target=lambda: errors.extend(
            run_programs(router.address, count=4, calls=3, max_tokens=24)))
        load.start()
        wait_until(lambda: router.call(lambda: bool(core.replicas[0].attempts)), timeout=30,
                   what="a call on replica 0")
        os.kill(procs[0].process.pid, signal.SIGSTOP)
        try:
            wait_until(lambda: not router.call(lambda: core.replicas[0].healthy), timeout=30,
                       what="replica 0 lost")
            load.join(120)
            assert not errors, errors
        finally:
            os.kill(procs[0].process.pid, signal.SIGCONT)
        wait_until(lambda: router.call(lambda: core.replicas[0].healthy), timeout=30,
                   what="replica 0 serving again")
        assert not run_programs(router.address, count=2, calls=2, max_tokens=2)
        for address in addresses:  # nothing left on either replica
            def idle() -> bool:
                with grpc.insecure_channel(address) as channel:
                    stats = agentix_pb2_grpc.AgentixStub(channel).EngineStats(
                        pb.EngineStatsRequest())
                return (stats.calls_running, stats.calls_waiting, stats.kv_blocks_used) == \
                    (0, 0, 0)
            wait_until(idle, timeout=30, what=f"{address} idle")
    finally:
        if router is not None:
            router.stop(grace=0)
        for proc in procs:
            proc.stop()


def test_stopping_the_router_mid_stream_ends_the_stream_retryably_and_leaves_nothing(
        tiny_llama_dir):
    """The stream either ends with a status the client retries, or (finished within the
    handlers' grace) whole; either way the replica has no call left."""
    replica = start(tiny_llama_dir, router_token=TOKEN)
    router = router_over([replica], make_placement("round_robin"))
    try:
        channel = grpc.insecure_channel(router.address)
        stub = agentix_pb2_grpc.AgentixStub(channel)
        request = pb.GenerateRequest(token_ids=pb.TokenIds(ids=[1, 5, 6]),
                                     sampling=pb.SamplingParams(max_tokens=200,
                                                                ignore_eos=True))
        stream = stub.Generate(request, timeout=60)
        next(stream)  # streaming has begun
        router.stop(grace=0)  # handlers still get HANDLER_GRACE (1 s) to finish
        kinds = []
        try:
            kinds = [response.WhichOneof("kind") for response in stream]
        except grpc.RpcError as exc:  # cut: a status the client library retries
            assert exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)
        else:  # it finished within the handlers' grace: then whole, with its final message
            assert kinds[-1] == "final"
        channel.close()
        wait_idle(replica, timeout=10)  # the replica aborted the router's call
    finally:
        router.stop(grace=0)
        replica.stop(grace=0)


def test_a_replica_at_a_tenth_of_its_speed_holds_up_no_program(tiny_llama_dir):
    """Replica 0's every step takes 50 ms more (a tenth of its speed or less), behind
    least_loaded placement: every program finishes and both replicas end idle. (Which
    replica gets more calls is not asserted: with loads polled every 0.2 s, calls placed
    between two polls follow the same stale figure, and in 1 of 4 runs the slow replica
    got the larger share.)"""
    with replicas_behind_least_loaded(tiny_llama_dir) as (replicas, router):
        slow_down(replicas[0], 0.05)
        assert not run_programs(router.address, count=6, calls=4, max_tokens=16)
        tokens = [r.engine_loop.call(lambda e: e.counters.generation_tokens)
                  for r in replicas]
        assert sum(tokens) == 6 * 4 * 16 and min(tokens) > 0


def test_a_replica_lost_while_n_choices_stream_ends_the_stream_with_an_error(tiny_llama_dir):
    """A streamed completion with n=2 through the router's OpenAI door, one choice on each
    replica (round_robin), each step 20 ms slower; once both choices stream, the network to
    replica 1 is cut. The client gets the router's error event (503: replica 1 lost
    mid-stream) and `[DONE]`, choice 0's call on replica 0 is aborted before its end, and
    nothing is left on the router or on replica 0."""
    max_tokens = 200  # 4 s of steps at least: choice 0 still runs when replica 1 is lost
    replicas = in_process_replicas(tiny_llama_dir)
    partition = Partition(replicas[1].address)
    router = router_over([replicas[0], partition.address], make_placement("round_robin"),
                         model=tiny_llama_dir, http_port=0)
    try:
        for replica in replicas:
            slow_down(replica, 0.02)
        wait_until(lambda: router.call(lambda: all(r.healthy for r in router.router.replicas)),
                   what="both replicas serving")  # replica 1's first check, through the relay
        sse = SSE(router, "/v1/completions", {"prompt": [1, 5, 6], "n": 2, "temperature": 0,
                                              "max_tokens": max_tokens, "ignore_eos": True},
                  timeout=10)
        chunks, streaming = sse.chunks(), set()
        while streaming != {0, 1}:
            streaming |= {choice["index"] for choice in next(chunks)["choices"]}
        partition.cut()
        *_, last = chunks
        sse.close()
        assert sse.done
        assert last == {"error": {
            "message": f"replica 1 ({partition.address}) was lost mid-stream: the call was "
                       f"cut; retry it (same call_id)",
            "type": "service_unavailable", "param": None, "code": None}}
        wait_until(lambda: router.call(lambda: not router.router.calls), what="router idle")
        wait_idle(replicas[0])
        assert replicas[0].engine_loop.call(
            lambda engine: engine.counters.generation_tokens) < max_tokens
    finally:
        partition.cut()
        router.stop(grace=0)
        for replica in replicas:
            replica.stop(grace=0)
