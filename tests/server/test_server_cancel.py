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


def test_a_failed_step_fails_only_the_calls_it_ran(tiny_llama_dir):
    """One seat: A runs, B waits. A step that raises in the executor names only A, so A's
    stream ends with "error" while B then runs to its end; nothing leaks."""
    import time

    from grpc_helpers import start

    from server import agentix_pb2_grpc

    server = start(tiny_llama_dir, max_num_seqs=1)
    try:
        with grpc.insecure_channel(server.address) as channel:
            stub = agentix_pb2_grpc.AgentixStub(channel)
            free = free_blocks(server)
            first = stub.Generate(gen_request([1, 5, 6], **LONG))
            next(first)
            second = stub.Generate(gen_request([1, 7, 8], max_tokens=4, ignore_eos=True))
            deadline = time.monotonic() + 5
            while server.engine_loop.call(lambda engine: engine.num_waiting) < 1:
                assert time.monotonic() < deadline, "the second call never queued"
                time.sleep(0.01)

            def break_next_step(engine) -> None:
                real_execute = engine.executor.execute

                def failing_execute(plan):
                    engine.executor.execute = real_execute
                    raise RuntimeError("injected executor failure")

                engine.executor.execute = failing_execute

            server.engine_loop.call(break_next_step)
            _, _, final = collect(first)
            assert final.finish_reason == "error"
            tokens, _, final = collect(second)
            assert final.finish_reason == "length" and len(tokens) == 4
            assert_clean(server, free, timeout=2.0)
    finally:
        server.stop(grace=0)
