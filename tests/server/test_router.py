"""The router in front of two in-process replicas: exact placement, token parity, every RPC,
cancellation and abort reaching the replica, a call's first-token deadline forwarded, auth
as on a single server."""

from __future__ import annotations

import asyncio
import threading

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_helpers import SMALL, collect, gen_request, live_ttft_slos, rpc_error, wait_idle
from grpc_reflection.v1alpha import reflection_pb2
from router_helpers import in_process_replicas, router_over, wait_until

from engine import LLM, ChatPrompt, SamplingParams
from scheduler.placement import make_placement
from server import agentix_pb2 as pb
from server import agentix_pb2_grpc
from server.client import AgentixClient, AgentixError

LONG = dict(max_tokens=200, ignore_eos=True)


@pytest.fixture(scope="module")
def router(replicas, tiny_llama_dir):
    running = router_over(replicas, make_placement("round_robin"), model=tiny_llama_dir)
    yield running
    running.stop(grace=0)


@pytest.fixture(scope="module")
def stub(router):
    with grpc.insecure_channel(router.address) as channel:
        yield agentix_pb2_grpc.AgentixStub(channel)


def use(router, placement):
    def swap():
        router.router.placement = placement
    router.call(swap)


@pytest.fixture
def idle(replicas):
    yield
    for server in replicas:
        wait_idle(server)


def on_replica(server, program_id):
    return server.engine_loop.call(lambda e: e.get_program(program_id).num_calls)


def test_round_robin_alternates_and_starts_programs_lazily(router, replicas, stub, idle):
    use(router, make_placement("round_robin"))
    pid = stub.StartProgram(pb.StartProgramRequest(program_id="rr", tenant="t",
                                                   program_class="chat")).program_id
    assert pid == "rr"
    for server in replicas:  # nothing on the replicas before a call
        with pytest.raises(KeyError):
            server.engine_loop.call(lambda e: e.get_program("rr"))
    engines = []
    for i in range(4):
        collect(stub.Generate(gen_request([1, 5 + i, 6], pid, max_tokens=2)))
        engines.append(stub.GetProgram(pb.GetProgramRequest(program_id=pid)).engine)
    assert engines == [0, 1, 0, 1]
    assert [on_replica(s, "rr") for s in replicas] == [2, 2]
    assert replicas[1].engine_loop.call(lambda e: e.get_program("rr").tenant) == "t"
    assert [s.engine_loop.call(lambda e: e.get_program("rr").program_class)
            for s in replicas] == ["chat", "chat"]
    info = stub.GetProgram(pb.GetProgramRequest(program_id=pid))
    assert info.program_class == "chat"
    assert (info.num_calls, info.prompt_tokens, info.generated_tokens) == (4, 12, 8)
    assert info.tenant == "t" and info.state == "active" and not info.active_calls
    ended = stub.EndProgram(pb.EndProgramRequest(program_id=pid))
    assert ended.state == "completed" and ended.num_calls == 4
    for server in replicas:  # ended on every replica it was started on
        assert server.engine_loop.call(lambda e: e.scheduler.table.is_recently_ended("rr"))
    assert stub.EndProgram(pb.EndProgramRequest(program_id=pid)).num_calls == 4  # again: same
    assert rpc_error(stub.GetProgram, pb.GetProgramRequest(program_id=pid)).code() == \
        grpc.StatusCode.NOT_FOUND


def test_pinned_programs_stick_to_their_replica(router, replicas, stub, idle):
    use(router, make_placement("pinned"))
    pids = [stub.StartProgram(pb.StartProgramRequest()).program_id for _ in range(2)]
    homes = {}
    for round_ in range(3):
        for pid in pids:
            collect(stub.Generate(gen_request([1, 9, 10 + round_], pid, max_tokens=2)))
            engine = stub.GetProgram(pb.GetProgramRequest(program_id=pid)).engine
            assert homes.setdefault(pid, engine) == engine
    for pid in pids:
        counts = [s.engine_loop.call(lambda e, p=pid: e.get_program(p).num_calls
                                     if p in e.scheduler.table else 0) for s in replicas]
        assert counts[homes[pid]] == 3 and sum(counts) == 3
        stub.EndProgram(pb.EndProgramRequest(program_id=pid))


def test_greedy_tokens_match_the_offline_engine(router, tiny_llama_dir, idle):
    use(router, make_placement("round_robin"))
    config = {k: v for k, v in SMALL.items() if k != "num_kv_blocks"}
    llm = LLM(tiny_llama_dir, **config)
    prompts = [[1, 5, 6, 7, 8, 9, 10, 11, 12, 13], "w20 w21 w22",
               ChatPrompt((("user", "w30 w31"),))]
    params = SamplingParams(max_tokens=12, ignore_eos=True)
    expected = [out.token_ids for out in llm.generate(prompts, params)]
    wire = [prompts[0], prompts[1], [{"role": "user", "content": "w30 w31"}]]
    with AgentixClient(router.address) as client, client.program() as prog:
        for _ in range(2):  # both replicas
            got = [list(prog.generate(p, max_tokens=12, ignore_eos=True).token_ids)
                   for p in wire]
            assert got == expected


def test_cancel_through_the_router_frees_the_replica_blocks(router, replicas, stub, idle):
    use(router, make_placement("round_robin"))
    streams = [stub.Generate(gen_request([1, 5, 6, 7, 8, 9] * 3, **LONG)) for _ in range(2)]
    for stream in streams:
        for _ in range(3):
            assert next(stream).HasField("delta")
    used = [s.engine_loop.call(lambda e: e.stats().kv_blocks_used) for s in replicas]
    assert all(used)  # one call on each replica
    for stream in streams:
        stream.cancel()
    for server in replicas:
        wait_idle(server)
    wait_until(lambda: router.call(lambda: not router.router.calls), what="router calls")


def test_abort_is_routed_to_the_call_replica(router, replicas, stub, idle):
    pid = stub.StartProgram(pb.StartProgramRequest()).program_id
    stream = stub.Generate(gen_request([1, 5, 6], pid, call_id="to-abort", **LONG))
    assert next(stream).HasField("delta")
    assert stub.Abort(pb.AbortRequest(call_id="to-abort")).aborted
    _, _, final = collect(stream)
    assert final.finish_reason == "abort"
    assert not stub.Abort(pb.AbortRequest(call_id="to-abort")).aborted
    assert not stub.Abort(pb.AbortRequest(call_id="never")).aborted
    info = stub.GetProgram(pb.GetProgramRequest(program_id=pid))
    assert info.num_calls == 1 and info.generated_tokens == final.usage.completion_tokens
    stub.EndProgram(pb.EndProgramRequest(program_id=pid))


def test_an_abort_while_the_router_starts_the_program_runs_nothing_on_the_replica(
        router, replicas, stub, idle):
    """The router's StartProgram to the call's replica is held until the Abort was
    answered: the call ends "abort" with nothing streamed, and the replica, which has the
    program, never got the call."""
    pid = stub.StartProgram(pb.StartProgramRequest()).program_id
    core = router.router
    entered, release = threading.Event(), threading.Event()
    ensure_started = core.ensure_started

    async def held(*args):
        entered.set()
        while not release.is_set():
            await asyncio.sleep(0.005)
        await ensure_started(*args)

    router.call(lambda: setattr(core, "ensure_started", held))
    try:
        stream = stub.Generate(gen_request([1, 5, 6], pid, call_id="starting", **LONG))
        assert entered.wait(10)
        assert stub.Abort(pb.AbortRequest(call_id="starting")).aborted
        release.set()
        tokens, _, final = collect(stream)
    finally:
        router.call(lambda: delattr(core, "ensure_started"))
    assert (tokens, final.finish_reason, final.usage.prompt_tokens) == ([], "abort", 3)
    info = stub.GetProgram(pb.GetProgramRequest(program_id=pid))
    assert (info.num_calls, info.generated_tokens) == (1, 0)
    assert on_replica(replicas[info.engine], pid) == 0
    stub.EndProgram(pb.EndProgramRequest(program_id=pid))


def test_end_program_aborts_its_calls_on_the_replicas(router, replicas, stub, idle):
    pid = stub.StartProgram(pb.StartProgramRequest()).program_id
    stream = stub.Generate(gen_request([1, 5, 6], pid, **LONG))
    next(stream)
    stub.EndProgram(pb.EndProgramRequest(program_id=pid, failed=True))
    _, _, final = collect(stream)
    assert final.finish_reason == "abort"


def test_ttft_slo_seconds_is_forwarded_to_the_replica(router, replicas, stub, idle):
    """Generate's ttft_slo_seconds is the deadline of the call on the replica that runs it."""
    pid = stub.StartProgram(pb.StartProgramRequest()).program_id
    request = gen_request([1, 5, 6], pid, **LONG)
    request.ttft_slo_seconds = 3.0
    stream = stub.Generate(request)
    assert next(stream).HasField("delta")
    assert [slo for server in replicas for slo in live_ttft_slos(server, pid)] == [3.0]
    stream.cancel()
    stub.EndProgram(pb.EndProgramRequest(program_id=pid))


def test_model_info_engine_stats_health_reflection(router, replicas, stub):
    info = stub.ModelInfo(pb.ModelInfoRequest())
    direct = replicas[0].engine_loop.call(lambda e: (e.vocab_size, e.config.block_size))
    assert (info.vocab_size, info.block_size, info.policy) == (*direct, "atlas")
    pid = stub.StartProgram(pb.StartProgramRequest()).program_id
    collect(stub.Generate(gen_request([1, 5, 6], pid, max_tokens=2)))
    stats = stub.EngineStats(pb.EngineStatsRequest(top_programs=5))
    one = replicas[0].engine_loop.call(lambda e: e.stats().kv_blocks_total)
    assert stats.kv_blocks_total == 2 * one
    assert pid in [p.program_id for p in stats.top_programs]
    stub.EndProgram(pb.EndProgramRequest(program_id=pid))
    with grpc.insecure_channel(router.address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for service in ("", "agentix.v1.Agentix"):
            reply = health.Check(health_pb2.HealthCheckRequest(service=service))
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
        info = channel.stream_stream(
            "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
            request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
            response_deserializer=reflection_pb2.ServerReflectionResponse.FromString)
        reply = next(info(iter([reflection_pb2.ServerReflectionRequest(list_services="")])))
        assert "agentix.v1.Agentix" in {s.name for s in reply.list_services_response.service}


def test_request_errors(router, stub, idle):
    code = grpc.StatusCode
    assert rpc_error(stub.Generate, gen_request([1, 5], "nope")).code() == code.NOT_FOUND
    err = rpc_error(stub.Generate, pb.GenerateRequest(text=""))
    assert err.code() == code.INVALID_ARGUMENT and err.details().startswith("prompt")
    err = rpc_error(stub.Generate, gen_request([1, 5], thread_id="bad id"))
    assert err.code() == code.INVALID_ARGUMENT and err.details().startswith("thread_id")
    err = rpc_error(stub.StartProgram, pb.StartProgramRequest(program_class="c" * 129))
    assert err.code() == code.INVALID_ARGUMENT and err.details().startswith("program_class")
    past_a_day = gen_request([1, 5], "nope")  # the router's own check, before NOT_FOUND
    past_a_day.ttft_slo_seconds = 86_401.0
    err = rpc_error(stub.Generate, past_a_day)
    assert err.code() == code.INVALID_ARGUMENT
    assert err.details() == "ttft_slo_seconds must be in (0, 86400], got 86401.0"
    err = rpc_error(stub.Generate, gen_request([1, 999_999], max_tokens=2))  # the replica's
    assert err.code() == code.INVALID_ARGUMENT and "vocabulary" in err.details()
    pid = stub.StartProgram(pb.StartProgramRequest(program_id="dup")).program_id
    err = rpc_error(stub.StartProgram, pb.StartProgramRequest(program_id="dup"))
    assert err.code() == code.ALREADY_EXISTS
    stream = stub.Generate(gen_request([1, 5, 6], pid, call_id="same", **LONG))
    next(stream)
    err = rpc_error(stub.Generate, gen_request([1, 5], pid, call_id="same"))
    assert err.code() == code.ALREADY_EXISTS
    stream.cancel()
    stub.EndProgram(pb.EndProgramRequest(program_id=pid))


def test_auth_through_the_router(tiny_llama_dir):
    tokens = {"tok-a": "alice", "tok-b": "bob"}
    replicas = in_process_replicas(tiny_llama_dir, auth_tokens=tokens)
    router = router_over(replicas, make_placement("round_robin"), auth_tokens=tokens)
    try:
        with AgentixClient(router.address) as anonymous:
            with pytest.raises(AgentixError) as info:
                anonymous.start_program()
            assert info.value.code == grpc.StatusCode.UNAUTHENTICATED
        with AgentixClient(router.address, token="tok-a") as alice, \
                AgentixClient(router.address, token="tok-b") as bob:
            with alice.program(program_id="shared-name") as prog:
                for _ in range(2):
                    prog.generate([1, 5, 6], max_tokens=2)
                assert prog.info()["tenant"] == "alice"
                with pytest.raises(AgentixError) as info:
                    bob.get_program("shared-name")
                assert info.value.code == grpc.StatusCode.NOT_FOUND
                with bob.program(program_id="shared-name") as other:  # its own namespace
                    other.generate([1, 7], max_tokens=2)
                    assert other.info()["num_calls"] == 1
            for server in replicas:  # the replicas saw alice's token: her namespace
                assert server.engine_loop.call(
                    lambda e: e.scheduler.table.is_recently_ended("alice/shared-name"))
            assert [p["program_id"] for p in bob.engine_stats(10)["top_programs"]] == []
    finally:
        router.stop(grace=0)
        for server in replicas:
            server.stop(grace=0)


def test_a_replica_that_forgot_the_program_is_barred_for_it(router, replicas, stub, idle):
    """The program's replica ended it (as its TTL would) while the router still has it: the
    router tries to start it there again, cannot (the id stays taken there), and moves the
    program to the other replica."""
    use(router, make_placement("pinned"))
    pid = stub.StartProgram(pb.StartProgramRequest(program_id="forgot")).program_id
    collect(stub.Generate(gen_request([1, 5, 6], pid, max_tokens=2)))
    home = stub.GetProgram(pb.GetProgramRequest(program_id=pid)).engine
    replicas[home].engine_loop.call(lambda e: e.end_program("forgot"))
    for _ in range(2):
        _, _, final = collect(stub.Generate(gen_request([1, 7, 8], pid, max_tokens=2)))
        assert final.finish_reason == "length"
        info = stub.GetProgram(pb.GetProgramRequest(program_id=pid))
        assert info.engine == 1 - home
    assert info.num_calls == 3
    stub.EndProgram(pb.EndProgramRequest(program_id=pid))


def test_client_retries_reuse_one_call_id(monkeypatch):
    from server import client as client_module

    seen = []

    def flaky(self, request):
        seen.append(request.call_id)
        if len(seen) < 3:
            raise AgentixError(grpc.StatusCode.UNAVAILABLE, "replica lost mid-stream")
        yield client_module.Completion(request.call_id, "", (), "length", None)

    monkeypatch.setattr(AgentixClient, "_stream", flaky)
    monkeypatch.setattr(client_module, "RETRY_BACKOFF_SECONDS", 0.0)
    with AgentixClient("127.0.0.1:1", retry_unavailable=2) as client:
        assert client.generate([1, 2]).finish_reason == "length"
        assert len(seen) == 3 and len(set(seen)) == 1 and seen[0].startswith("call-")
        seen.clear()
        with pytest.raises(AgentixError):
            client.generate([1, 2], retries=1)
        assert len(seen) == 2
        with pytest.raises(ValueError, match="retries"):
            client.generate([1, 2], retries=-1)


def test_the_router_sizes_prompts_as_the_replicas_tokenize_them(tiny_llama_dir, replicas):
    """Placement sees the replica's token count and its prefix-cache keys."""
    import asyncio

    from server.router.prompts import RouterPrompts, block_hashes

    prompts = RouterPrompts(tiny_llama_dir)
    try:
        text = " ".join(f"w{i}" for i in range(5, 25))
        chat = pb.GenerateRequest(messages=pb.ChatMessages(messages=[
            pb.ChatMessage(role="user", content=text)]))
        for request, prompt in ((pb.GenerateRequest(text=text), text),
                                (chat, ChatPrompt((("user", text),))),
                                (gen_request(list(range(3, 20))), list(range(3, 20)))):
            ids = replicas[0].engine_loop.call(lambda e, p=prompt: e.tokenize_prompt(p))
            shape = asyncio.run(prompts.shape(request, 8))
            assert shape.num_tokens == len(ids)
            assert shape.block_hashes == block_hashes(ids, 8) and len(shape.block_hashes) == \
                len(ids) // 8
        with pytest.raises(ValueError, match="prompt"):
            asyncio.run(RouterPrompts(None, max_prompt_bytes=4).shape(
                pb.GenerateRequest(text="w5 w6 w7"), 8))
    finally:
        prompts.close()


def test_a_router_without_a_live_replica_fails_to_start():
    import threading

    from server.router import start_router

    counts = []
    for _ in range(2):  # the first may start grpc's one poller thread of the process
        with pytest.raises(TimeoutError, match="no replica answered"):
            start_router(replicas=["127.0.0.1:1"], placement=make_placement("round_robin"),
                         ready_timeout=0.3)
        counts.append(threading.active_count())
    with pytest.raises(ValueError, match="at least one replica"):
        start_router(replicas=[], placement=make_placement("round_robin"))
    assert threading.active_count() == counts[0] == counts[1]  # nothing left running
