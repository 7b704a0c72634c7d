"""A program's priority value from a trusted router: the replica accepts `program_priority`
only with the router token, raises the program's service to it (booked as floor: its own
service stays what the replica charged) before the call is placed, and a router's value is
the one it folded over every replica."""

from __future__ import annotations

import grpc
import pytest
from grpc_helpers import collect, gen_request, rpc_error, start

from engine import LLMEngine, SamplingParams
from scheduler.placement import make_placement
from server import agentix_pb2 as pb
from server import agentix_pb2_grpc
from server.auth import ROUTER_TOKEN_HEADER, RouterTrust
from server.router import start_router

TOKEN = "router-secret"
TRUSTED = ((ROUTER_TOKEN_HEADER, TOKEN),)
TOKENS_MODE = dict(service_mode="tokens", tenant_halflife=None)


def test_router_trust_compares_the_one_header():
    trust = RouterTrust(TOKEN)
    assert trust.trusted(TRUSTED)
    assert trust.trusted(((ROUTER_TOKEN_HEADER.upper(), f" {TOKEN} "),))
    assert not trust.trusted(())
    assert not trust.trusted(((ROUTER_TOKEN_HEADER, "guess"),))
    assert not trust.trusted(TRUSTED + TRUSTED)  # two headers: ambiguous
    with pytest.raises(ValueError, match="router_token"):
        RouterTrust("two words")


def test_engine_raises_the_program_service_as_floor(tiny_llama_dir):
    from grpc_helpers import server_config

    engine = LLMEngine(server_config(tiny_llama_dir, **TOKENS_MODE))
    pid = engine.start_program()
    with pytest.raises(ValueError, match="program_service"):
        engine.add_call(pid, [1, 5, 6], program_service=-1.0)
    with pytest.raises(ValueError, match="program_service"):
        engine.add_call(pid, [1, 5, 6], program_service=float("nan"))
    engine.add_call(pid, [1, 5, 6], SamplingParams(max_tokens=2, ignore_eos=True),
                    program_service=1000.0)
    record = engine.get_program(pid)
    assert record.service == 1000.0 and record.floor == 1000.0 and record.own_service == 0.0
    levels = engine.scheduler.levels
    (call,) = record.active_calls.values()
    assert call.start_value == 1000.0 and call.queue == levels.level_of(1000.0) > 0
    while engine.has_unfinished_calls():
        engine.step()
    charged = record.own_service
    assert charged > 0 and record.service == 1000.0 + charged  # ATLAS: start + own
    engine.add_call(pid, [1, 7], SamplingParams(max_tokens=1), program_service=10.0)
    assert record.service == 1000.0 + charged  # a lower value never lowers it
    while engine.has_unfinished_calls():
        engine.step()
    engine.check_integrity()


def test_a_raised_program_credits_its_tenant_only_its_own_service():
    """The router's value already counts the other replicas' service: booked as floor, it is
    never credited to the tenant here a second time."""
    from scheduler.process_table import CallRecord, ProcessTable

    table = ProcessTable(600.0, tenant_halflife=1e9)
    program = table.start(0.0, "p", "t")
    call = CallRecord("c", "p", None, 1.0)
    table.add_call(call, 3)
    table.raise_service(program, 100.0)
    assert (program.service, program.floor, program.own_service) == (100.0, 100.0, 0.0)
    table.raise_service(program, 50.0)  # never lowered
    assert program.service == 100.0
    program.service += 5.0  # the policy's fold of the call's own service
    table.complete_call(call, 2.0, 1)
    table.end("p", now=2.0)
    assert table.tenant_service("t", 2.0) == pytest.approx(5.0)


@pytest.fixture(scope="module")
def replica(tiny_llama_dir):
    server = start(tiny_llama_dir, router_token=TOKEN, **TOKENS_MODE)
    yield server
    server.stop(grace=0)


def test_a_client_setting_the_priority_is_refused(replica, tiny_llama_dir):
    untrusted = start(tiny_llama_dir)  # no router token: nobody may set it
    try:
        for server, metadata in ((replica, ()), (replica, ((ROUTER_TOKEN_HEADER, "guess"),)),
                                 (untrusted, TRUSTED)):
            with grpc.insecure_channel(server.address) as channel:
                stub = agentix_pb2_grpc.AgentixStub(channel)
                request = gen_request([1, 5, 6], max_tokens=2)
                request.program_priority = 5.0
                err = rpc_error(stub.Generate, request, metadata=metadata)
                assert err.code() == grpc.StatusCode.PERMISSION_DENIED
                assert err.details() == "program_priority: only a trusted router may set it"
    finally:
        untrusted.stop(grace=0)


def test_the_trusted_value_lands_and_a_bad_one_is_refused(replica):
    with grpc.insecure_channel(replica.address) as channel:
        stub = agentix_pb2_grpc.AgentixStub(channel)
        pid = stub.StartProgram(pb.StartProgramRequest()).program_id
        request = gen_request([1, 5, 6], pid, max_tokens=2, ignore_eos=True)
        request.program_priority = float("inf")
        err = rpc_error(stub.Generate, request, metadata=TRUSTED)
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert err.details().startswith("program_priority:")
        request.program_priority = 700.0
        _, _, final = collect(stub.Generate(request, metadata=TRUSTED))
        info = stub.GetProgram(pb.GetProgramRequest(program_id=pid))
        assert info.service == 700.0 + final.usage.service_seconds
        stub.EndProgram(pb.EndProgramRequest(program_id=pid))


def test_the_router_sends_the_value_it_folded_over_replicas(tiny_llama_dir):
    """Round robin puts call 1 on replica 0 and call 2 on replica 1: replica 1 starts the
    program from the service of call 1 (the router's value), so after call 2 replica 1,
    the router and a single engine agree on the program's service exactly."""
    replicas = [start(tiny_llama_dir, router_token=TOKEN, **TOKENS_MODE) for _ in range(2)]
    router = start_router(replicas=[r.address for r in replicas],
                          placement=make_placement("round_robin"), router_token=TOKEN)
    try:
        with grpc.insecure_channel(router.address) as channel:
            stub = agentix_pb2_grpc.AgentixStub(channel)
            pid = stub.StartProgram(pb.StartProgramRequest(program_id="p")).program_id
            services = []
            for prompt in ([1, 5, 6, 7], [1, 8, 9]):
                _, _, final = collect(stub.Generate(gen_request(prompt, pid, max_tokens=3,
                                                                ignore_eos=True)))
                services.append(final.usage.service_seconds)
            info = stub.GetProgram(pb.GetProgramRequest(program_id=pid))
            assert info.engine == 1 and info.num_calls == 2
            assert info.service == sum(services)  # ATLAS on a sequential program: the sum
            on_replicas = [r.engine_loop.call(lambda e: e.get_program("p").service)
                           for r in replicas]
            assert on_replicas == [services[0], info.service]
            request = gen_request([1, 5], pid, max_tokens=1)
            request.program_priority = 1.0
            err = rpc_error(stub.Generate, request)
            assert err.code() == grpc.StatusCode.PERMISSION_DENIED
            stub.EndProgram(pb.EndProgramRequest(program_id=pid))
    finally:
        router.stop(grace=0)
        for r in replicas:
            r.stop(grace=0)
