"""A client that cancels its stream (or lets a deadline pass) gets its call aborted: the
blocks are free again within a scheduling round."""

from __future__ import annotations

import grpc
import pytest
from grpc_helpers import assert_clean, collect, free_blocks, gen_request

LONG = dict(max_tokens=240, ignore_eos=True)


def test_cancel_mid_stream_frees_blocks(grpc_server, stub):
    free = free_blocks(grpc_server)
    stream = stub.Generate(gen_request([1, 5, 6, 7, 8], **LONG))
    for _ in range(10):
        assert next(stream).HasField("delta")
    assert free_blocks(grpc_server) < free
    stream.cancel()
    assert_clean(grpc_server, free, timeout=2.0)


def test_cancel_of_parallel_calls_of_one_program(grpc_server, stub):
    from server import agentix_pb2 as pb

    free = free_blocks(grpc_server)
    pid = stub.StartProgram(pb.StartProgramRequest()).program_id
    streams = [stub.Generate(gen_request([1, 9 + i] * 4, pid, **LONG)) for i in range(4)]
    for stream in streams:
        next(stream)
    for stream in streams:
        stream.cancel()
    assert_clean(grpc_server, free, timeout=2.0)
    info = stub.GetProgram(pb.GetProgramRequest(program_id=pid))
    assert info.num_calls == 4 and not info.active_calls
    stub.EndProgram(pb.EndProgramRequest(program_id=pid))


def test_deadline_aborts_the_call(grpc_server, stub):
    free = free_blocks(grpc_server)
    stream = stub.Generate(gen_request([1, 5, 6], **LONG), timeout=0.05)
    with pytest.raises(grpc.RpcError) as info:
        for _ in stream:
            pass
    assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert_clean(grpc_server, free, timeout=2.0)


def test_an_engine_failure_fails_the_calls_in_flight_and_the_server_goes_on(grpc_server, stub):
    """If a step raises, the streams in flight end with finish_reason "error", their blocks
    are freed, and later calls run normally."""
    free = free_blocks(grpc_server)

    def break_next_step(engine) -> None:
        real_step = engine.step

        def failing_step():
            engine.step = real_step
            raise RuntimeError("injected engine failure")

        engine.step = failing_step

    stream = stub.Generate(gen_request([1, 5, 6], **LONG))
    next(stream)
    grpc_server.engine_loop.call(break_next_step)
    _, _, final = collect(stream)
    assert final.finish_reason == "error"
    assert_clean(grpc_server, free, timeout=2.0)
    _, _, final = collect(stub.Generate(gen_request([1, 5, 6], max_tokens=3)))
    assert final.finish_reason in ("length", "stop")
