"""Helpers for the gRPC server tests: start a server over the tiny word-level Llama (token
i is the word `w{i}`), build requests, read streams, and check that nothing leaked."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import grpc
import pytest

from engine import EngineConfig
from server import agentix_pb2 as pb

SMALL = dict(block_size=8, num_kv_blocks=64, dtype="float32", policy="atlas")


def server_config(model_dir: str, **overrides) -> EngineConfig:
    return EngineConfig.from_flat(model=model_dir, **{**SMALL, **overrides})


def start(model_dir: str, **kwargs):
    """A server over the tiny model; kwargs split into start_server's and engine config's."""
    from server.app import start_server

    from dataclasses import fields

    from server.app import ServeOptions

    names = {f.name for f in fields(ServeOptions)}
    server_kwargs = {k: kwargs.pop(k) for k in list(kwargs) if k in names}
    return start_server(server_config(model_dir, **kwargs), **server_kwargs)


def free_blocks(server) -> int:
    return server.engine_loop.call(lambda engine: engine.kv.num_free_blocks)


def assert_clean(server, free_at_start: int, timeout: float = 5.0) -> None:
    """Within `timeout`, no call is left in the engine, every block is free again, and the
    block pool, scheduler and process table agree (checked on the engine thread)."""
    deadline = time.monotonic() + timeout

    def state(engine) -> tuple[bool, int, int]:
        return engine.has_unfinished_calls(), len(engine.calls), engine.kv.num_free_blocks

    idle = (False, 0, free_at_start)
    while (now := server.engine_loop.call(state)) != idle and time.monotonic() < deadline:
        time.sleep(0.01)
    assert now == idle, "(unfinished calls, calls not popped, free blocks)"
    server.engine_loop.call(lambda engine: engine.check_integrity())


def wait_idle(server, timeout: float = 5.0) -> None:
    """Within `timeout`: no call left anywhere, no device block owned, and the pools and
    tables agree (checked on the engine thread)."""
    def state(engine):
        return engine.has_unfinished_calls(), len(engine.calls), engine.stats().kv_blocks_used

    deadline = time.monotonic() + timeout
    while (now := server.engine_loop.call(state)) != (False, 0, 0) \
            and time.monotonic() < deadline:
        time.sleep(0.01)
    assert now == (False, 0, 0), "(unfinished calls, calls not popped, kv_blocks_used)"
    server.engine_loop.call(lambda engine: engine.check_integrity())


def gen_request(prompt: list[int] | str, program_id: str = "", **fields) -> pb.GenerateRequest:
    """A GenerateRequest; `fields` go to SamplingParams except thread_id/call_id."""
    ids = {k: fields.pop(k) for k in ("thread_id", "call_id") if k in fields}
    kind = {"text": prompt} if isinstance(prompt, str) else {"token_ids": pb.TokenIds(ids=prompt)}
    return pb.GenerateRequest(program_id=program_id, sampling=pb.SamplingParams(**fields),
                              **ids, **kind)


def collect(responses) -> tuple[list[int], str, pb.Final]:
    """(streamed token ids, streamed text, the final message) of a Generate stream."""
    ids, text, final = [], "", None
    for response in responses:
        assert final is None, "nothing may follow the final message"
        if response.HasField("delta"):
            ids.extend(response.delta.token_ids)
            text += response.delta.text
        else:
            final = response.final
    assert final is not None, "the stream must end with a final message"
    return ids, text, final


def victim_rate(stub, tokens: int = 150, skip: int = 20, max_tokens: int = 240) -> float:
    """Tokens/s of one long greedy stream (ignore_eos), over `tokens` of its messages after
    the first `skip`: a count, not a time window, so a slow machine measures as many."""
    stream = stub.Generate(gen_request([1, 9, 10], max_tokens=max_tokens, ignore_eos=True))
    stamps = [time.perf_counter() for _ in zip(range(max_tokens), stream)]
    assert len(stamps) >= skip + tokens, "the victim's stream ended early"
    window = stamps[skip:skip + tokens]
    return (len(window) - 1) / (window[-1] - window[0])


def live_ttft_slos(server, program_id: str) -> list[float | None]:
    """The first-token deadlines (CallRecord.ttft_slo) of `program_id`'s live calls on
    `server`'s engine, in arrival order; [] when the engine has no such program."""
    from engine.errors import UnknownProgramError

    def read(engine) -> list[float | None]:
        try:
            calls = engine.get_program(program_id).active_calls.values()
        except UnknownProgramError:
            return []
        return [call.ttft_slo for call in calls]

    return server.engine_loop.call(read)


def rpc_error(fn, *args, **kwargs) -> grpc.RpcError:
    """The RpcError that `fn(*args)` raises (streams are consumed)."""
    with pytest.raises(grpc.RpcError) as info:
        result = fn(*args, **kwargs)
        if hasattr(result, "__iter__") and not hasattr(result, "SerializeToString"):
            list(result)
    return info.value


class SlowExecutor:
    """Runs every step through `inner`, then sleeps `seconds` (an engine at a fraction of
    its speed)."""

    def __init__(self, inner, seconds: float) -> None:
        self.inner, self.seconds = inner, seconds

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    def execute(self, plan):
        result = self.inner.execute(plan)
        time.sleep(self.seconds)
        return result


def slow_down(server, seconds: float) -> None:
    """Make every later step of `server`'s engine take `seconds` more."""
    server.engine_loop.call(lambda engine: setattr(
        engine, "executor", SlowExecutor(engine.executor, seconds)))


@contextlib.contextmanager
def slowed(server, seconds: float) -> Iterator[None]:
    """`slow_down` for the block, then the engine's own speed again."""
    slow_down(server, seconds)
    try:
        yield
    finally:
        server.engine_loop.call(lambda engine: setattr(
            engine, "executor", engine.executor.inner))
