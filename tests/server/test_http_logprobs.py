"""`logprobs` through the HTTP door with the official `openai` SDK: chat's `logprobs.content`
and the completions API's legacy arrays, streamed and not, each entry the engine's own
logprob of the token (tests/engine/test_logprobs.py checks those against transformers) with
its text (the word tokenizer's `w{id}`)."""

from __future__ import annotations

import openai
import pytest
from grpc_helpers import server_config

from engine import LLM, SamplingParams
from server.app import start_server

MESSAGES = [{"role": "user", "content": "w30 w31 w32"}]
EXTRA = {"ignore_eos": True, "return_token_ids": True}


@pytest.fixture(scope="module")
def client(tiny_llama_dir):
    server = start_server(server_config(tiny_llama_dir), port=None, http_port=0,
                          served_model_name="tiny")
    with openai.OpenAI(base_url=f"http://{server.http_address}/v1", api_key="unused",
                       max_retries=0) as client:
        yield client
    server.stop(grace=0)


@pytest.fixture(scope="module")
def engine_logprobs(tiny_llama_dir):
    """The offline engine's logprobs (3 alternatives) of a greedy answer to token ids."""
    llm = LLM(tiny_llama_dir)

    def answer(prompt: list[int], n: int):
        (out,) = llm.generate([prompt], SamplingParams(max_tokens=n, ignore_eos=True,
                                                       logprobs=3))
        return out.logprobs
    yield answer
    llm.close()


def test_chat_logprobs_name_each_token_and_its_alternatives(client):
    answer = client.chat.completions.create(
        model="tiny", messages=MESSAGES, temperature=0, max_tokens=5, logprobs=True,
        top_logprobs=2, extra_body=EXTRA)
    choice = answer.choices[0]
    content = choice.logprobs.content
    assert [entry.token for entry in content] == [f"w{t}" for t in choice.token_ids]
    for entry in content:
        assert entry.bytes == list(entry.token.encode())
        assert len(entry.top_logprobs) == 2
        assert (entry.top_logprobs[0].token, entry.top_logprobs[0].logprob) == (
            entry.token, entry.logprob)  # greedy: the most likely token
        assert entry.logprob <= 0 and entry.top_logprobs[1].logprob <= entry.logprob


@pytest.mark.parametrize("top_logprobs", [openai.NOT_GIVEN, None, 0])
def test_without_logprobs_a_choice_has_none(client, top_logprobs):
    """No `logprobs`: none, with `top_logprobs` unset, null or 0 (as on vLLM; more
    alternatives without `logprobs` are a 400: test_http_errors.py)."""
    answer = client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=2,
                                            top_logprobs=top_logprobs)
    assert answer.choices[0].logprobs is None


def test_completion_logprobs_are_the_engines_in_the_legacy_arrays(client, engine_logprobs):
    prompt = [30, 31, 32, 33]
    answer = client.completions.create(model="tiny", prompt=prompt, temperature=0,
                                       max_tokens=4, logprobs=3, extra_body=EXTRA)
    logprobs = answer.choices[0].logprobs
    expected = engine_logprobs(prompt, 4)
    assert logprobs.tokens == [f"w{e.token_id}" for e in expected]
    assert logprobs.token_logprobs == pytest.approx([e.logprob for e in expected], abs=1e-6)
    assert logprobs.top_logprobs == [
        pytest.approx({f"w{t}": v for t, v in e.top}, abs=1e-6) for e in expected]
    texts = logprobs.tokens
    assert logprobs.text_offset == [sum(len(t) for t in texts[:i]) for i in range(len(texts))]


def test_streamed_chat_carries_each_tokens_logprobs(client):
    stream = client.chat.completions.create(
        model="tiny", messages=MESSAGES, temperature=0, max_tokens=5, logprobs=True,
        top_logprobs=1, stream=True, extra_body=EXTRA)
    entries, token_ids = [], []
    for chunk in stream:
        for choice in chunk.choices:
            token_ids += getattr(choice, "token_ids", None) or []
            if choice.logprobs is not None:
                entries += choice.logprobs.content
    assert [e.token for e in entries] == [f"w{t}" for t in token_ids] and len(entries) == 5
    assert all(len(e.top_logprobs) == 1 for e in entries)


def test_streamed_completion_offsets_continue_across_chunks(client):
    stream = client.completions.create(model="tiny", prompt=[30, 31], temperature=0,
                                       max_tokens=4, logprobs=0, stream=True, extra_body=EXTRA)
    tokens, offsets = [], []
    for chunk in stream:
        logprobs = chunk.choices[0].logprobs if chunk.choices else None
        if logprobs is not None:
            tokens += logprobs.tokens
            offsets += logprobs.text_offset
    assert len(tokens) == 4
    assert offsets == [sum(len(t) for t in tokens[:i]) for i in range(4)]
