"""Failover: a replica process killed with SIGKILL under load. Calls it had not started are
retried on the other replica by the router; calls it was streaming end UNAVAILABLE and the
clients' retry option re-sends them with the same id; every program finishes, its pinned
programs are re-pinned, the router loses no record, and a replica that comes back on its
address is used again."""

from __future__ import annotations

import threading

import grpc
import pytest
from router_helpers import TOKEN, ReplicaProcess, router_over, wait_until

from scheduler.placement import make_placement
from server import agentix_pb2 as pb
from server import agentix_pb2_grpc
from server.client import AgentixClient

PROGRAMS = 6
CALLS = 3
MAX_TOKENS = 48


@pytest.fixture
def token_file(tmp_path):
    path = tmp_path / "router-token"
    path.write_text(TOKEN + "\n")
    return path


def run_program(address: str, index: int, results: dict, errors: list) -> None:
    try:
        with AgentixClient(address, retry_unavailable=3) as client, \
                client.program(program_id=f"p{index}") as prog:
            outs = [prog.generate([1, 5 + index, 6 + c] * 3, max_tokens=MAX_TOKENS,
                                  ignore_eos=True) for c in range(CALLS)]
            results[prog.program_id] = (prog.info(), outs)
    except Exception as exc:  # reported by the test
        errors.append(exc)


def test_sigkill_under_load(tiny_llama_dir, token_file):
    # One running call per replica: the others wait in its queue (not started).
    procs = [ReplicaProcess(tiny_llama_dir, token_file, "--max-num-seqs", "1")
             for _ in range(2)]
    router = None
    try:
        addresses = [p.wait_ready() for p in procs]
        router = router_over(addresses, make_placement("pinned"))
        core = router.router
        results: dict = {}
        errors: list = []
        threads = [threading.Thread(target=run_program,
                                    args=(router.address, i, results, errors))
                   for i in range(PROGRAMS)]
        for thread in threads:
            thread.start()

        found: list[int] = []

        def busy() -> bool:
            """A replica with a call streaming and another waiting behind it."""
            def states():
                seen = {0: set(), 1: set()}
                for call in core.calls.values():
                    if call.attempt is not None:
                        seen[call.attempt.replica].add(call.streamed)
                return [r for r, kinds in seen.items() if kinds == {True, False}]
            found[:] = router.call(states)
            return bool(found)

        wait_until(busy, timeout=30, what="a busy replica")
        victim = found[0]
        survivor = 1 - victim
        pinned_to_victim = router.call(
            lambda: {p for p in (f"p{i}" for i in range(PROGRAMS))
                     if core.placement.pins.get(p) == victim})
        assert pinned_to_victim
        procs[victim].kill()
        for thread in threads:
            thread.join(60)
        assert not errors, errors
        assert len(results) == PROGRAMS
        assert core.retried >= 1          # waiting calls moved before a token
        assert core.lost_mid_stream >= 1  # the running one: the client retried it
        for pid, (info, outs) in results.items():
            assert info["num_calls"] == CALLS, pid
            assert info["generated_tokens"] == sum(len(o.token_ids) for o in outs)
            assert all(len(o.token_ids) == MAX_TOKENS for o in outs)
            assert info["engine"] == survivor  # re-pinned (or pinned) to the survivor
        assert {results[p][0]["engine"] for p in pinned_to_victim} == {survivor}
        with grpc.insecure_channel(router.address) as channel:  # no record lost
            stub = agentix_pb2_grpc.AgentixStub(channel)
            for pid in results:
                err = None
                try:
                    stub.GetProgram(pb.GetProgramRequest(program_id=pid))
                except grpc.RpcError as exc:
                    err = exc
                assert err is not None and err.code() == grpc.StatusCode.NOT_FOUND  # ended
            with grpc.insecure_channel(addresses[survivor]) as direct:
                stats = agentix_pb2_grpc.AgentixStub(direct).EngineStats(
                    pb.EngineStatsRequest())
                assert (stats.calls_running, stats.calls_waiting, stats.kv_blocks_used) == \
                    (0, 0, 0)

        # The replica comes back on its address: healthy again, and used again.
        port = int(addresses[victim].rsplit(":", 1)[1])
        procs[victim] = ReplicaProcess(tiny_llama_dir, token_file, port=port)
        procs[victim].wait_ready()
        wait_until(lambda: router.call(lambda: core.replicas[victim].healthy), timeout=20,
                   what="the replica healthy again")
        use_round_robin = make_placement("round_robin")
        router.call(lambda: setattr(core, "placement", use_round_robin))
        with AgentixClient(router.address) as client, client.program() as prog:
            engines = set()
            for _ in range(2):
                prog.generate([1, 5], max_tokens=2)
                engines.add(prog.info()["engine"])
            assert engines == {0, 1}
    finally:
        if router is not None:
            router.stop(grace=0)
        for proc in procs:
            proc.stop()

