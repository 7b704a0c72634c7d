"""A program over the wire: start, sequential and parallel calls, records, end; streamed
tokens equal the offline engine's greedy tokens; text streaming; Abort and EndProgram of
running calls; ModelInfo."""

from __future__ import annotations

import threading
from pathlib import Path

import grpc
import pytest
from grpc_helpers import collect, gen_request, live_ttft_slos, rpc_error

from engine import LLM, SamplingParams
from server import agentix_pb2 as pb

PROMPTS = [[1, 17, 42, 99, 5], [1, 200, 201], [1, 7, 8, 9, 10, 11, 12, 13, 14, 15],
           [3, 4], [1, 300, 301, 302, 303, 304, 305, 306, 307, 308, 309, 310], [50] * 9]
MAX_TOKENS = 12


@pytest.fixture(scope="module")
def reference(tiny_llama_dir) -> list[list[int]]:
    """The offline engine's greedy tokens for PROMPTS."""
    llm = LLM(tiny_llama_dir, block_size=8, num_kv_blocks=64)
    outs = llm.generate(PROMPTS, SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True))
    return [out.token_ids for out in outs]


def words(ids: list[int]) -> str:
    """The word-level tokenizer's text (ids 0-2 are special and skipped)."""
    return " ".join(f"w{i}" for i in ids if i > 2)


def test_program_sequential_then_parallel_calls(stub, clean, reference):
    pid = stub.StartProgram(pb.StartProgramRequest(tenant="team-a")).program_id
    for i in range(3):  # sequential
        ids, text, final = collect(stub.Generate(gen_request(
            PROMPTS[i], pid, max_tokens=MAX_TOKENS, ignore_eos=True, thread_id="main")))
        assert ids == reference[i]
        assert final.finish_reason == "length"
        assert final.text == text == words(reference[i])
        usage = final.usage
        assert (usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens) == \
            (len(PROMPTS[i]), MAX_TOKENS, 0)
        assert usage.service_seconds > 0 and usage.queue_seconds >= 0

    results: dict[int, tuple] = {}

    def branch(i: int) -> None:
        results[i] = collect(stub.Generate(gen_request(
            PROMPTS[i], pid, max_tokens=MAX_TOKENS, ignore_eos=True, thread_id=f"branch-{i}")))

    threads = [threading.Thread(target=branch, args=(i,)) for i in range(3, 6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in range(3, 6):
        ids, text, final = results[i]
        assert ids == reference[i] and final.text == text == words(reference[i])

    info = stub.GetProgram(pb.GetProgramRequest(program_id=pid))
    assert (info.program_id, info.tenant, info.state) == (pid, "team-a", "active")
    assert info.num_calls == 6 and not info.active_calls
    assert info.prompt_tokens == sum(map(len, PROMPTS))
    assert info.generated_tokens == 6 * MAX_TOKENS
    assert info.service > 0 and info.last_call_completion >= info.last_call_arrival > 0

    ended = stub.EndProgram(pb.EndProgramRequest(program_id=pid))
    assert (ended.state, ended.num_calls) == ("completed", 6)
    again = stub.EndProgram(pb.EndProgramRequest(program_id=pid, failed=True))
    assert again == ended  # ending a recently ended program returns its record
    err = rpc_error(stub.GetProgram, pb.GetProgramRequest(program_id=pid))
    assert err.code() == grpc.StatusCode.NOT_FOUND and "program_id" in err.details()


def test_one_call_program_and_proposed_ids(stub, clean, reference):
    ids, _, final = collect(stub.Generate(gen_request(
        PROMPTS[0], max_tokens=MAX_TOKENS, ignore_eos=True, call_id="my-call")))
    assert ids == reference[0] and final.finish_reason == "length"
    responses = list(stub.Generate(gen_request(PROMPTS[0], max_tokens=2, call_id="my-call-2")))
    assert {r.call_id for r in responses} == {"my-call-2"}
    pid = stub.StartProgram(pb.StartProgramRequest(program_id="agent-7")).program_id
    assert pid == "agent-7"
    stub.EndProgram(pb.EndProgramRequest(program_id=pid, failed=True))
    assert stub.EndProgram(pb.EndProgramRequest(program_id=pid)).state == "failed"


def test_program_class_reaches_the_process_table(grpc_server, stub, clean):
    """StartProgram's program_class lands in the engine's record and GetProgram shows it;
    an empty one is no class."""
    def stored(program_id: str) -> str | None:
        return grpc_server.engine_loop.call(
            lambda engine: engine.get_program(program_id).program_class)

    pid = stub.StartProgram(pb.StartProgramRequest(tenant="team-a",
                                                   program_class="react-agent")).program_id
    plain = stub.StartProgram(pb.StartProgramRequest(tenant="team-a")).program_id
    assert (stored(pid), stored(plain)) == ("react-agent", None)
    info = stub.GetProgram(pb.GetProgramRequest(program_id=pid))
    assert (info.tenant, info.program_class) == ("team-a", "react-agent")
    assert stub.GetProgram(pb.GetProgramRequest(program_id=plain)).program_class == ""
    for program_id in (pid, plain):
        stub.EndProgram(pb.EndProgramRequest(program_id=program_id))


def test_ttft_slo_seconds_reaches_the_call_record(grpc_server, stub, clean):
    """Generate's ttft_slo_seconds is the live call's first-token deadline; a call without
    one has the engine's (none on this server)."""
    pid = stub.StartProgram(pb.StartProgramRequest()).program_id
    timed = gen_request(PROMPTS[0], pid, max_tokens=200, ignore_eos=True)
    timed.ttft_slo_seconds = 2.5
    streams = [stub.Generate(timed),
               stub.Generate(gen_request(PROMPTS[1], pid, max_tokens=200, ignore_eos=True))]
    for stream in streams:
        assert next(stream).HasField("delta")
    assert live_ttft_slos(grpc_server, pid) == [2.5, None]
    for stream in streams:
        stream.cancel()
    stub.EndProgram(pb.EndProgramRequest(program_id=pid))


def test_text_prompt_equals_token_prompt(stub, clean, reference):
    text_prompt = words(PROMPTS[1][1:])  # the tokenizer adds no BOS: drop it from the ids
    ids, _, _ = collect(stub.Generate(gen_request(text_prompt, max_tokens=MAX_TOKENS,
                                                  ignore_eos=True)))
    token_ids, _, _ = collect(stub.Generate(gen_request(PROMPTS[1][1:], max_tokens=MAX_TOKENS,
                                                        ignore_eos=True)))
    assert ids == token_ids


def test_chat_messages_go_through_the_chat_template(stub, clean, tiny_llama_dir):
    """The word tokenizer's template puts a marker word before each turn (system w6, user w7)
    and w9 as the generation prompt: a chat is exactly that token prompt."""
    messages = [pb.ChatMessage(role="system", content="w20 w21"),
                pb.ChatMessage(role="user", content="w30 w31")]
    request = gen_request([1], max_tokens=MAX_TOKENS, ignore_eos=True)
    request.messages.messages.extend(messages)
    ids, _, final = collect(stub.Generate(request))
    expected, _, _ = collect(stub.Generate(gen_request(
        [6, 20, 21, 7, 30, 31, 9], max_tokens=MAX_TOKENS, ignore_eos=True)))
    assert ids == expected and final.usage.prompt_tokens == 7
    request.messages.messages[0].role = "wizard"
    err = rpc_error(lambda r: list(stub.Generate(r)), request)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "messages[0].role" in err.details()


def test_stop_string_is_cut_and_never_streamed(stub, clean, reference):
    out = reference[2]
    stop = f"w{out[3]} w{out[4]}"  # spans two tokens: its first half must be held back
    ids, text, final = collect(stub.Generate(gen_request(
        PROMPTS[2], max_tokens=MAX_TOKENS, ignore_eos=True, stop=[stop])))
    assert final.finish_reason == "stop"
    assert ids == out[:5]
    assert final.text == text == words(out[:3]) + " "
    assert final.usage.completion_tokens == 5


def test_stop_token_id(stub, clean, reference):
    out = reference[0]
    ids, _, final = collect(stub.Generate(gen_request(
        PROMPTS[0], max_tokens=MAX_TOKENS, ignore_eos=True, stop_token_ids=[out[2]])))
    assert ids == out[:3] and final.finish_reason == "stop"


def test_abort_rpc_ends_the_stream(stub, clean):
    stream = stub.Generate(gen_request([5, 6, 7], max_tokens=200, ignore_eos=True,
                                       call_id="to-abort"))
    first = next(stream)
    assert first.call_id == "to-abort" and first.HasField("delta")
    assert stub.Abort(pb.AbortRequest(call_id="to-abort")).aborted
    ids, _, final = collect(stream)
    assert final.finish_reason == "abort" and len(ids) < 199
    assert not stub.Abort(pb.AbortRequest(call_id="to-abort")).aborted
    assert not stub.Abort(pb.AbortRequest(call_id="never-was")).aborted


def test_end_program_aborts_its_running_calls(stub, clean):
    pid = stub.StartProgram(pb.StartProgramRequest()).program_id
    stream = stub.Generate(gen_request([5, 6, 7], pid, max_tokens=200, ignore_eos=True))
    next(stream)
    info = stub.GetProgram(pb.GetProgramRequest(program_id=pid))
    assert len(info.active_calls) == 1
    ended = stub.EndProgram(pb.EndProgramRequest(program_id=pid))
    assert ended.state == "completed"
    _, _, final = collect(stream)
    assert final.finish_reason == "abort"


def test_model_info(stub, tiny_llama_dir):
    """The model's directory name, never the server's filesystem path."""
    info = stub.ModelInfo(pb.ModelInfoRequest())
    assert (info.model, info.vocab_size, info.max_model_len, info.policy, info.block_size,
            info.num_kv_blocks) == (Path(tiny_llama_dir).name, 384, 256, "atlas", 8, 64)
    assert "/" not in info.model
