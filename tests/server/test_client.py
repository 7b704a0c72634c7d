"""The client library against a real server on a tiny model: programs, calls, streams,
cancellation, parallel calls, errors, the asyncio client and auth metadata."""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest
from grpc_helpers import live_ttft_slos

from engine import LLM, EngineConfig, SamplingParams
from server.app import start_server
from server.client import (AgentixClient, AgentixError, AsyncAgentixClient, Completion, Delta,
                           Program)

PROMPTS = [[1, 17, 42, 99, 5], [1, 200, 201], [1, 7, 8, 9, 10, 11, 12, 13, 14, 15]]
TEXT_PROMPT = "w17 w42 w99 w5"
GREEDY = dict(max_tokens=8, ignore_eos=True)


def engine_config(model_dir: str) -> EngineConfig:
    return EngineConfig(model=model_dir, block_size=8, num_kv_blocks=64, policy="atlas")


@pytest.fixture(scope="module")
def server(tiny_llama_dir):
    running = start_server(engine_config(tiny_llama_dir))
    yield running
    running.stop(grace=0)


@pytest.fixture(scope="module")
def auth_server(tiny_llama_dir):
    running = start_server(engine_config(tiny_llama_dir), auth_tokens={"secret": "team-a"})
    yield running
    running.stop(grace=0)


@pytest.fixture(scope="module")
def client(server):
    with AgentixClient(server.address, timeout=30) as c:
        yield c


@pytest.fixture(scope="module")
def offline(tiny_llama_dir):
    """The offline engine's greedy completions of PROMPTS, then of TEXT_PROMPT."""
    llm = LLM(tiny_llama_dir, block_size=8, num_kv_blocks=64)
    return llm.generate([*PROMPTS, TEXT_PROMPT], SamplingParams(**GREEDY))


@pytest.fixture(scope="module")
def reference(offline):
    """The offline engine's greedy token ids for PROMPTS."""
    return [out.token_ids for out in offline[:len(PROMPTS)]]


@pytest.fixture(scope="module")
def text_reference(offline):
    return offline[-1]


def free_blocks(server) -> int:
    return server.engine_loop.call(lambda engine: engine.kv.num_free_blocks)


def wait_until(predicate, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_model_info(client, server):
    info = client.model_info()
    assert (info["vocab_size"], info["block_size"], info["policy"]) == (384, 8, "atlas")
    assert info["max_model_len"] == server.engine_loop.call(lambda engine: engine.max_model_len)


def test_program_context_manager_starts_and_ends_the_program(client):
    with client.program(program_id="ctx-ok") as prog:
        assert prog.program_id == "ctx-ok"
        assert prog.info()["state"] == "active"
        prog.generate(PROMPTS[0], **GREEDY)
    assert prog.end_info["program_id"] == "ctx-ok"
    assert prog.end_info["state"] == "completed"
    assert prog.end_info["num_calls"] == 1
    with pytest.raises(AgentixError) as err:
        client.get_program("ctx-ok")
    assert err.value.code == grpc.StatusCode.NOT_FOUND


def test_program_fails_when_the_block_raises(client):
    with pytest.raises(KeyError, match="boom"):
        with client.program() as prog:
            program_id = prog.program_id
            raise KeyError("boom")
    assert prog.end_info["state"] == "failed"
    with pytest.raises(AgentixError) as err:
        client.get_program(program_id)
    assert err.value.code == grpc.StatusCode.NOT_FOUND


def test_start_program_and_end_return_the_record(client):
    prog = client.start_program(tenant="t1")
    assert client.get_program(prog.program_id)["tenant"] == "t1"
    record = prog.end(failed=True)
    assert (record["program_id"], record["state"], record["active_calls"]) == \
        (prog.program_id, "failed", [])


def test_program_class_is_sent_on_start_program(client, server):
    """`program_class` of start_program, program() and the async twins reaches the
    engine's record (and GetProgram's)."""
    def stored(program_id: str) -> str | None:
        return server.engine_loop.call(
            lambda engine: engine.get_program(program_id).program_class)

    prog = client.start_program(tenant="t1", program_class="tree-search")
    assert stored(prog.program_id) == "tree-search"
    assert prog.info()["program_class"] == "tree-search"
    prog.end()
    with client.program(tenant="t1", program_class="chat") as prog:
        assert (stored(prog.program_id), prog.info()["tenant"]) == ("chat", "t1")
    with client.program() as prog:
        assert stored(prog.program_id) is None

    async def flow() -> list[str | None]:
        async with AsyncAgentixClient(server.address, timeout=30) as aclient:
            started = await aclient.start_program(program_class="async-start")
            seen = [stored(started.program_id)]
            await started.end()
            async with aclient.program(tenant="t1", program_class="async-ctx") as aprog:
                seen.append(stored(aprog.program_id))
            return seen

    assert asyncio.run(flow()) == ["async-start", "async-ctx"]


def test_generate_matches_the_offline_engine(client, reference):
    done = client.generate(PROMPTS[0], **GREEDY)  # a one-call program of its own
    assert done.token_ids == tuple(reference[0])
    assert done.finish_reason == "length"
    assert (done.usage.prompt_tokens, done.usage.completion_tokens) == (len(PROMPTS[0]), 8)
    with client.program() as prog:
        assert prog.generate(PROMPTS[1], thread_id="main", **GREEDY).token_ids == \
            tuple(reference[1])


def test_text_prompt_matches_the_offline_engine(client, text_reference):
    done = client.generate(TEXT_PROMPT, **GREEDY)
    assert (done.token_ids, done.text) == (tuple(text_reference.token_ids), text_reference.text)
    assert done.usage.prompt_tokens == len(text_reference.prompt_token_ids)


def test_stream_yields_deltas_then_the_completion(client, reference):
    with client.program() as prog:
        items = list(prog.stream(PROMPTS[2], call_id="streamed", **GREEDY))
    *deltas, done = items
    assert deltas and all(isinstance(d, Delta) for d in deltas)
    assert isinstance(done, Completion)
    assert {item.call_id for item in items} == {"streamed"}
    assert tuple(i for d in deltas for i in d.token_ids) == done.token_ids == tuple(reference[2])
    assert "".join(d.text for d in deltas) == done.text


def test_breaking_out_of_a_stream_aborts_the_call(client, server):
    start = free_blocks(server)
    with client.program() as prog:
        for item in prog.stream(PROMPTS[0], max_tokens=200, ignore_eos=True):
            assert isinstance(item, Delta)
            break
        assert wait_until(lambda: not prog.info()["active_calls"])
        assert wait_until(lambda: free_blocks(server) == start)
        assert prog.info()["generated_tokens"] < 200


def test_abort_unknown_call_returns_false(client):
    assert client.abort("no-such-call") is False


def test_generate_many_returns_results_in_prompt_order(client, reference):
    with client.program() as prog:
        results = prog.generate_many(PROMPTS, **GREEDY)
        assert [r.token_ids for r in results] == [tuple(ids) for ids in reference]
        assert len({r.call_id for r in results}) == len(PROMPTS)
        assert prog.info()["num_calls"] == len(PROMPTS)


def test_errors_surface_as_agentix_error(client):
    with pytest.raises(AgentixError) as err:
        client.get_program("no-such-program")
    assert err.value.code == grpc.StatusCode.NOT_FOUND
    with pytest.raises(AgentixError) as err:
        Program(client, "no-such-program").generate(PROMPTS[0], **GREEDY)
    assert err.value.code == grpc.StatusCode.NOT_FOUND
    with pytest.raises(AgentixError) as err:
        client.generate(PROMPTS[0], top_p=1.5)
    assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "top_p" in err.value.details
    assert str(err.value).startswith("INVALID_ARGUMENT: ")


def test_bad_sampling_key_raises_type_error_before_any_rpc():
    with AgentixClient("127.0.0.1:1") as nowhere:  # any RPC here would fail UNAVAILABLE
        prog = Program(nowhere, "p")
        for attempt in (lambda: nowhere.generate("w5", temprature=0.5),
                        lambda: nowhere.stream("w5", temprature=0.5),
                        lambda: prog.stream("w5", temprature=0.5),
                        lambda: prog.generate_many(["w5", "w6"], temprature=0.5)):
            with pytest.raises(TypeError, match="temprature"):
                attempt()


def test_async_client_basic_flow(server, reference):
    async def flow():
        async with AsyncAgentixClient(server.address, timeout=30) as client:
            assert (await client.model_info())["vocab_size"] == 384
            async with client.program() as prog:
                done = await prog.generate(PROMPTS[0], **GREEDY)
                items = [item async for item in prog.stream(PROMPTS[1], **GREEDY)]
                many = await prog.generate_many(PROMPTS, **GREEDY)
                assert (await prog.info())["num_calls"] == 2 + len(PROMPTS)
            with pytest.raises(AgentixError) as err:
                await client.get_program(prog.program_id)
            return done, items, many, prog.end_info, err.value.code

    done, items, many, end_info, code = asyncio.run(flow())
    assert done.token_ids == tuple(reference[0])
    assert isinstance(items[-1], Completion) and items[-1].token_ids == tuple(reference[1])
    assert tuple(i for d in items[:-1] for i in d.token_ids) == tuple(reference[1])
    assert [r.token_ids for r in many] == [tuple(ids) for ids in reference]
    assert end_info["state"] == "completed"
    assert code == grpc.StatusCode.NOT_FOUND


def test_token_metadata_is_sent(auth_server):
    with AgentixClient(auth_server.address) as anonymous:
        with pytest.raises(AgentixError) as err:
            anonymous.model_info()
        assert err.value.code == grpc.StatusCode.UNAUTHENTICATED
    with AgentixClient(auth_server.address, token="secret") as client:
        with client.program() as prog:
            assert prog.info()["tenant"] == "team-a"
            assert len(prog.generate(PROMPTS[0], **GREEDY).token_ids) == 8


def test_expected_tool_seconds_reaches_the_engine(client, server):
    """A hint of 0 s retains nothing after the call; a long hint starts a retention (of no
    blocks here: this server runs without prefix caching, so nothing stays cached)."""
    def stats():
        return server.engine_loop.call(lambda engine: engine.scheduler.stats())

    with client.program() as prog:
        before = stats()["retentions"]
        prog.generate(PROMPTS[0], expected_tool_seconds=0.0, **GREEDY)
        assert stats()["retentions"] == before
        prog.generate(PROMPTS[0], expected_tool_seconds=30.0, **GREEDY)
        after = stats()
        assert (after["retentions"], after["retained_blocks"]) == (before + 1, 0)


def test_ttft_slo_seconds_is_sent_with_the_call(client, server):
    """`ttft_slo_seconds` of stream() and generate(), sync and async, is Generate's field: a
    live call carries it in the engine, None leaves it unset, a bad one is refused by name."""
    start = free_blocks(server)
    with client.program() as prog:
        stream = prog.stream(PROMPTS[0], max_tokens=200, ignore_eos=True, ttft_slo_seconds=1.5)
        assert isinstance(next(stream), Delta)
        assert live_ttft_slos(server, prog.program_id) == [1.5]
        stream.close()
        assert prog.generate(PROMPTS[1], ttft_slo_seconds=None, **GREEDY).finish_reason == \
            "length"
    for refused in (lambda: client.generate(PROMPTS[0], ttft_slo_seconds=0.0, **GREEDY),
                    lambda: list(client.stream(PROMPTS[0], ttft_slo_seconds=-1.0, **GREEDY))):
        with pytest.raises(AgentixError) as err:
            refused()
        assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT
        assert err.value.details.startswith("ttft_slo_seconds must be in (0, 86400]")

    async def flow() -> tuple[list[float | None], str]:
        async with AsyncAgentixClient(server.address, timeout=30) as aclient:
            async with aclient.program() as aprog:
                stream = aprog.stream(PROMPTS[0], max_tokens=200, ignore_eos=True,
                                      ttft_slo_seconds=4.0)
                assert isinstance(await anext(stream), Delta)
                seen = live_ttft_slos(server, aprog.program_id)
                await stream.aclose()
            with pytest.raises(AgentixError) as err:
                await aclient.generate(PROMPTS[0], ttft_slo_seconds=1e6, **GREEDY)
            return seen, err.value.details

    assert asyncio.run(flow()) == ([4.0], "ttft_slo_seconds must be in (0, 86400], got 1000000.0")
    assert wait_until(lambda: free_blocks(server) == start)
    server.engine_loop.call(lambda engine: engine.check_integrity())


def test_chat_messages_and_engine_stats(client):
    """Messages go through the server's chat template (the word tokenizer's: user turn w7,
    generation prompt w9); engine_stats reads the server's load and counters."""
    with client.program() as prog:
        chat = prog.generate([{"role": "user", "content": "w30 w31"}], **GREEDY)
        tokens = prog.generate([7, 30, 31, 9], **GREEDY)
        stats = client.engine_stats(top_programs=5)
    assert chat.token_ids == tokens.token_ids and chat.usage.prompt_tokens == 4
    assert stats["kv_blocks_used"] + stats["kv_blocks_free"] + stats["kv_blocks_cached"] == \
        stats["kv_blocks_total"] == 63
    assert prog.program_id in [p["program_id"] for p in stats["top_programs"]]
    with pytest.raises(AgentixError) as info:
        client.engine_stats(top_programs=101)
    assert info.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "top_programs" in info.value.details
