"""`logprobs` over gRPC: `SamplingParams.logprobs` asks for them, each Delta carries one
TokenLogprob per token id (its logprob and the top alternatives, most likely first), equal
to the offline engine's (tests/engine/test_logprobs.py checks those against transformers);
`prompt_logprobs` come on the first Delta, one per prompt token after the first, equal to
the offline engine's; a bound past 20 is INVALID_ARGUMENT naming the field."""

from __future__ import annotations

import grpc
import pytest
from grpc_helpers import start, wait_idle

from engine import LLM, SamplingParams
from server import agentix_pb2 as pb
from server import agentix_pb2_grpc

PROMPT = [1, 30, 31, 32]


@pytest.fixture(scope="module")
def server_stub(tiny_llama_dir):
    server = start(tiny_llama_dir)
    with grpc.insecure_channel(server.address) as channel:
        yield server, agentix_pb2_grpc.AgentixStub(channel)
    server.stop(grace=0)


def generate(stub, **sampling) -> list[pb.GenerateResponse]:
    return list(stub.Generate(pb.GenerateRequest(
        token_ids=pb.TokenIds(ids=PROMPT),
        sampling=pb.SamplingParams(max_tokens=5, ignore_eos=True, **sampling)), timeout=60))


def test_each_delta_carries_its_tokens_logprobs(server_stub, tiny_llama_dir):
    server, stub = server_stub
    deltas = [r.delta for r in generate(stub, logprobs=3) if r.HasField("delta")]
    with LLM(tiny_llama_dir) as llm:
        (expected,) = llm.generate([PROMPT], SamplingParams(max_tokens=5, ignore_eos=True,
                                                            logprobs=3))
    assert all(len(d.logprobs) == len(d.token_ids) for d in deltas)
    got = [lp for d in deltas for lp in d.logprobs]
    assert [lp.token_id for lp in got] == expected.token_ids
    assert [lp.logprob for lp in got] == pytest.approx(
        [e.logprob for e in expected.logprobs], abs=1e-5)
    assert [[(t.token_id, t.logprob) for t in lp.top] for lp in got] == [
        [(t, pytest.approx(v, abs=1e-5)) for t, v in e.top] for e in expected.logprobs]
    wait_idle(server)


def test_without_logprobs_deltas_carry_none(server_stub):
    _, stub = server_stub
    assert not any(r.delta.logprobs for r in generate(stub) if r.HasField("delta"))


def test_the_first_delta_carries_the_prompt_logprobs(server_stub, tiny_llama_dir):
    server, stub = server_stub
    deltas = [r.delta for r in generate(stub, prompt_logprobs=2) if r.HasField("delta")]
    with LLM(tiny_llama_dir) as llm:
        (expected,) = llm.generate([PROMPT], SamplingParams(max_tokens=5, ignore_eos=True,
                                                            prompt_logprobs=2))
    assert expected.prompt_logprobs[0] is None
    got = deltas[0].prompt_logprobs
    assert [lp.token_id for lp in got] == PROMPT[1:]
    assert [lp.logprob for lp in got] == pytest.approx(
        [e.logprob for e in expected.prompt_logprobs[1:]], abs=1e-5)
    assert [[t.token_id for t in lp.top] for lp in got] == [
        [t for t, _ in e.top] for e in expected.prompt_logprobs[1:]]
    assert not any(d.prompt_logprobs for d in deltas[1:])
    wait_idle(server)


@pytest.mark.parametrize("field", ["logprobs", "prompt_logprobs"])
def test_more_than_20_alternatives_is_invalid_argument(server_stub, field):
    server, stub = server_stub
    with pytest.raises(grpc.RpcError) as info:
        generate(stub, **{field: 21})
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert info.value.details().startswith(field)
    wait_idle(server)
