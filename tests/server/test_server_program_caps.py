"""Caps on active programs over the wire: past `max_programs_per_tenant` or `max_programs` a
new program gets RESOURCE_EXHAUSTED naming the limit; ending one makes room; a Generate
without a program is never refused by them; the server keeps serving."""

from __future__ import annotations

import grpc
import pytest
from grpc_helpers import assert_clean, collect, free_blocks, gen_request, rpc_error, start

from engine import LLM, EngineConfig, SamplingParams
from engine.errors import ProgramLimitError
from server import agentix_pb2 as pb
from server import agentix_pb2_grpc
from server.errors import status_of

PROMPT = [1, 17, 42, 99, 5]
MAX_TOKENS = 8


@pytest.fixture(scope="module")
def capped(tiny_llama_dir):
    server = start(tiny_llama_dir, max_programs_per_tenant=3, max_programs=5)
    yield server
    server.stop(grace=0)


@pytest.fixture(scope="module")
def stub(capped):
    with grpc.insecure_channel(capped.address) as channel:
        yield agentix_pb2_grpc.AgentixStub(channel)


@pytest.fixture(scope="module")
def reference(tiny_llama_dir) -> list[int]:
    """The offline engine's greedy tokens for PROMPT."""
    llm = LLM(tiny_llama_dir, block_size=8, num_kv_blocks=64)
    [out] = llm.generate([PROMPT], SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True))
    return out.token_ids


def start_program(stub, tenant: str = "") -> str:
    return stub.StartProgram(pb.StartProgramRequest(tenant=tenant)).program_id


def end_all(stub, program_ids: list[str]) -> None:
    for pid in program_ids:
        stub.EndProgram(pb.EndProgramRequest(program_id=pid))


def greedy(stub, program_id: str = "") -> list[int]:
    ids, _, final = collect(stub.Generate(gen_request(PROMPT, program_id, max_tokens=MAX_TOKENS,
                                                      ignore_eos=True)))
    assert final.finish_reason == "length"
    return ids


def test_a_tenant_past_its_cap_is_refused_until_one_ends(capped, stub, reference):
    free = free_blocks(capped)
    team_a = [start_program(stub, "team-a") for _ in range(3)]
    err = rpc_error(stub.StartProgram, pb.StartProgramRequest(tenant="team-a"))
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert err.details() == ("max_programs_per_tenant: 3 programs of tenant 'team-a' are "
                             "active, the limit is 3")
    team_b = [start_program(stub, "team-b") for _ in range(2)]  # another tenant's own cap
    err = rpc_error(stub.StartProgram, pb.StartProgramRequest(tenant="team-c"))
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert err.details() == "max_programs: 5 programs are active, the limit is 5"

    end_all(stub, team_a[:1])
    team_a = team_a[1:] + [start_program(stub, "team-a")]  # room again
    assert greedy(stub, team_a[-1]) == reference
    assert capped.engine_loop.call(lambda e: len(e.scheduler.table)) == 5
    end_all(stub, team_a + team_b)
    assert_clean(capped, free)


def test_a_program_flood_cannot_lock_out_plain_calls(capped, stub, reference):
    """With the tenantless cap full, a Generate without a program still runs: its one-call
    program is bounded by the waiting queue and the seats, not by the program caps."""
    free = free_blocks(capped)
    untenanted = [start_program(stub) for _ in range(3)]
    assert rpc_error(stub.StartProgram, pb.StartProgramRequest()).code() == \
        grpc.StatusCode.RESOURCE_EXHAUSTED
    assert greedy(stub) == reference
    end_all(stub, untenanted)
    assert_clean(capped, free)
    assert capped.engine_loop.call(lambda e: len(e.scheduler.table)) == 0


def test_the_limit_maps_to_resource_exhausted_and_the_bounds_are_validated():
    assert status_of(ProgramLimitError("max_programs: ...")) == \
        grpc.StatusCode.RESOURCE_EXHAUSTED
    for name in ("max_programs", "max_programs_per_tenant", "max_tenants"):
        with pytest.raises(ValueError, match=f"{name} must be positive"):
            EngineConfig.from_flat(**{name: 0})
