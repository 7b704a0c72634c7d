"""Priority gaming over the wire: a tenant that makes every call a fresh one-call program
does not overtake a tenant that runs the same calls in one program, because the token's
tenant carries its recent service into each new program (and the contrast without it)."""

from __future__ import annotations

import threading

import grpc
from grpc_helpers import assert_clean, collect, free_blocks, gen_request, start

from server import agentix_pb2 as pb
from server import agentix_pb2_grpc

TOKENS = {"tok-honest": "honest", "tok-gamer": "gamer"}
CALLS = 6
PROMPT = [1, 11, 12, 13, 14, 15, 16, 17]


def race(model_dir: str, tenant_halflife: float | None) -> list[str]:
    """Both tenants issue CALLS sequential calls at once, on one seat with token service
    and swap preemption. Returns who finished each call, in completion order."""
    server = start(model_dir, auth_tokens=TOKENS, max_num_seqs=1, service_mode="tokens",
                   quantum_base=8, num_queues=6, starvation_beta=None,
                   preemption_mode="swap", num_host_blocks=64, tenant_halflife=tenant_halflife)
    order: list[str] = []
    lock = threading.Lock()
    barrier = threading.Barrier(2)
    try:
        free = free_blocks(server)
        with grpc.insecure_channel(server.address) as channel:
            stub = agentix_pb2_grpc.AgentixStub(channel)

            def client(who: str) -> None:
                metadata = [("authorization", f"Bearer tok-{who}")]
                pid = ""
                if who == "honest":
                    pid = stub.StartProgram(pb.StartProgramRequest(), metadata=metadata).program_id
                barrier.wait()
                for _ in range(CALLS):
                    _, _, final = collect(stub.Generate(
                        gen_request(PROMPT, pid, max_tokens=8, ignore_eos=True),
                        metadata=metadata))
                    assert final.finish_reason == "length"
                    with lock:
                        order.append(who)
                if pid:
                    stub.EndProgram(pb.EndProgramRequest(program_id=pid), metadata=metadata)

            threads = [threading.Thread(target=client, args=(who,)) for who in ("honest", "gamer")]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=60)
            assert len(order) == 2 * CALLS
            assert_clean(server, free)
            assert server.engine_loop.call(lambda e: len(e.scheduler.table)) == 0
    finally:
        server.stop(grace=0)
    return order


def honest_done_when_gamer_finished(order: list[str]) -> int:
    last_gamer = max(i for i, who in enumerate(order) if who == "gamer")
    return order[:last_gamer].count("honest")


def test_a_fresh_program_per_call_does_not_overtake(tiny_llama_dir):
    order = race(tiny_llama_dir, tenant_halflife=300.0)
    assert honest_done_when_gamer_finished(order) >= CALLS - 1, order


def test_without_tenant_accounting_the_gamer_overtakes(tiny_llama_dir):
    order = race(tiny_llama_dir, tenant_halflife=None)
    assert honest_done_when_gamer_finished(order) <= CALLS // 2, order
