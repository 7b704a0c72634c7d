"""Bad requests get exact status codes, messages that name the field, and leave no blocks
or records behind."""

from __future__ import annotations

import time

import grpc
import pytest
from grpc_helpers import assert_clean, collect, free_blocks, gen_request, rpc_error, start

from server import agentix_pb2 as pb
from server import agentix_pb2_grpc

INVALID = grpc.StatusCode.INVALID_ARGUMENT
GOOD = [1, 5, 6]


def with_ttft_slo(seconds: float) -> pb.GenerateRequest:
    return pb.GenerateRequest(token_ids=pb.TokenIds(ids=GOOD), ttft_slo_seconds=seconds)


BAD_GENERATE = {
    "empty text prompt": (pb.GenerateRequest(text=""), "prompt"),
    "empty token prompt": (pb.GenerateRequest(token_ids=pb.TokenIds(ids=[])), "prompt"),
    "missing prompt": (pb.GenerateRequest(), "prompt"),
    "over-long prompt": (gen_request([5] * 256), "prompt"),
    "token id past the vocabulary": (gen_request([5, 384]), "prompt: token id 384"),
    "negative token id": (gen_request([5, -1]), "prompt: token id -1"),
    "negative temperature": (gen_request(GOOD, temperature=-0.5), "temperature"),
    "nan temperature": (gen_request(GOOD, temperature=float("nan")), "temperature"),
    "top_p 0": (gen_request(GOOD, top_p=0.0), "top_p"),
    "top_p 2": (gen_request(GOOD, top_p=2.0), "top_p"),
    "negative top_k": (gen_request(GOOD, top_k=-1), "top_k"),
    "max_tokens 0": (gen_request(GOOD, max_tokens=0), "max_tokens"),
    "negative max_tokens": (gen_request(GOOD, max_tokens=-3), "max_tokens"),
    "negative seed": (gen_request(GOOD, seed=-1), "seed"),
    "empty stop string": (gen_request(GOOD, stop=[""]), "stop"),
    "too many stop strings": (gen_request(GOOD, stop=["a"] * 17), "stop: at most 16"),
    "over-long stop string": (gen_request(GOOD, stop=["x" * 257]), "stop: each stop string"),
    "negative tool time": (pb.GenerateRequest(token_ids=pb.TokenIds(ids=GOOD),
                                              expected_tool_seconds=-1.0),
                           "expected_tool_seconds"),
    "nan tool time": (pb.GenerateRequest(token_ids=pb.TokenIds(ids=GOOD),
                                         expected_tool_seconds=float("nan")),
                      "expected_tool_seconds"),
    "tool time past a day": (pb.GenerateRequest(token_ids=pb.TokenIds(ids=GOOD),
                                                expected_tool_seconds=1e6),
                             "expected_tool_seconds"),
    "first-token deadline 0": (with_ttft_slo(0.0),
                               "ttft_slo_seconds must be in (0, 86400], got 0.0"),
    "negative first-token deadline": (with_ttft_slo(-2.0),
                                      "ttft_slo_seconds must be in (0, 86400], got -2.0"),
    "first-token deadline past a day": (with_ttft_slo(86_400.5),
                                        "ttft_slo_seconds must be in (0, 86400], got 86400.5"),
    "nan first-token deadline": (with_ttft_slo(float("nan")),
                                 "ttft_slo_seconds must be in (0, 86400], got nan"),
}


@pytest.mark.parametrize("request_, field", BAD_GENERATE.values(), ids=BAD_GENERATE.keys())
def test_invalid_generate(stub, clean, request_, field):
    err = rpc_error(stub.Generate, request_)
    assert err.code() == INVALID, err.details()
    assert field in err.details()


def test_invalid_program_ids(stub, clean):
    for call, request_ in ((stub.GetProgram, pb.GetProgramRequest()),
                           (stub.EndProgram, pb.EndProgramRequest())):
        err = rpc_error(call, request_)
        assert err.code() == INVALID and "program_id" in err.details()
    err = rpc_error(stub.Abort, pb.AbortRequest())
    assert err.code() == INVALID and "call_id" in err.details()


def test_unknown_and_ended_programs_are_not_found(stub, clean):
    pid = stub.StartProgram(pb.StartProgramRequest()).program_id
    stub.EndProgram(pb.EndProgramRequest(program_id=pid))
    for program_id in ("no-such-program", pid):
        for call, request_ in (
                (stub.GetProgram, pb.GetProgramRequest(program_id=program_id)),
                (stub.Generate, gen_request(GOOD, program_id)),
        ):
            err = rpc_error(call, request_)
            assert err.code() == grpc.StatusCode.NOT_FOUND, err.details()
            assert "program_id" in err.details() and program_id in err.details()
    err = rpc_error(stub.EndProgram, pb.EndProgramRequest(program_id="no-such-program"))
    assert err.code() == grpc.StatusCode.NOT_FOUND


def test_reused_ids_already_exist(stub, clean):
    stream = stub.Generate(gen_request(GOOD, max_tokens=200, ignore_eos=True, call_id="dup"))
    next(stream)
    err = rpc_error(stub.Generate, gen_request(GOOD, call_id="dup"))
    assert err.code() == grpc.StatusCode.ALREADY_EXISTS and "call_id" in err.details()
    stream.cancel()

    pid = stub.StartProgram(pb.StartProgramRequest(program_id="taken")).program_id
    err = rpc_error(stub.StartProgram, pb.StartProgramRequest(program_id="taken"))
    assert err.code() == grpc.StatusCode.ALREADY_EXISTS and "program_id" in err.details()
    stub.EndProgram(pb.EndProgramRequest(program_id=pid))


def test_odd_but_valid_sampling_runs(stub, clean):
    """Extremes the engine must survive: tiny temperature (greedy), top_k past the vocab,
    stop ids outside it, a seed at the bound."""
    for fields in (dict(temperature=1e-30), dict(temperature=1.0, top_k=10**6, seed=2**63 - 1),
                   dict(temperature=5.0, top_p=1e-6), dict(stop_token_ids=[-5, 10**6])):
        _, _, final = collect(stub.Generate(gen_request(GOOD, max_tokens=3, ignore_eos=True,
                                                        **fields)))
        assert final.finish_reason == "length", fields


def test_waiting_queue_bound(tiny_llama_dir):
    """With one seat and max_waiting=1: a running call, one waiting call, then the next
    call is RESOURCE_EXHAUSTED."""
    server = start(tiny_llama_dir, max_num_seqs=1, max_waiting=1)
    try:
        free = free_blocks(server)
        with grpc.insecure_channel(server.address) as channel:
            stub = agentix_pb2_grpc.AgentixStub(channel)
            running = stub.Generate(gen_request(GOOD, max_tokens=200, ignore_eos=True))
            next(running)
            waiting = stub.Generate(gen_request(GOOD, max_tokens=200, ignore_eos=True))
            queued = 0
            for _ in range(500):
                queued = server.engine_loop.call(lambda e: len(e.scheduler.queued))
                if queued == 1:
                    break
                time.sleep(0.01)
            assert queued == 1
            err = rpc_error(stub.Generate, gen_request(GOOD))
            assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "waiting queue" in err.details()
            running.cancel()
            waiting.cancel()
            assert_clean(server, free)
    finally:
        server.stop(grace=0)
