"""`echo` on /v1/completions with the official `openai` SDK, as lm-eval-harness scores a
prompt: the prompt's text before the output, its tokens' logprobs (the first null) equal to
transformers' log-softmax, `max_tokens` 0 for the prompt alone, the same streamed (the
prompt as the first chunk), with the prefix cache warm, and through the router."""

from __future__ import annotations

import openai
import pytest
import torch
from grpc_helpers import server_config, wait_idle
from router_helpers import router_over
from transformers import AutoModelForCausalLM

from scheduler.placement import make_placement
from server.app import start_server

PROMPT = [30, 31, 32, 33, 7, 12, 40, 41, 5, 9, 14, 3]  # spans blocks of 8 tokens
WORDS = [f"w{t}" for t in PROMPT]


@pytest.fixture(scope="module")
def server(tiny_llama_dir):
    server = start_server(server_config(tiny_llama_dir, enable_prefix_caching=True),
                          port=None, http_port=0, served_model_name="tiny")
    yield server
    server.stop(grace=0)


@pytest.fixture(scope="module")
def client(server):
    with openai.OpenAI(base_url=f"http://{server.http_address}/v1", api_key="unused",
                       max_retries=0) as client:
        yield client


@pytest.fixture(scope="module")
def reference(tiny_llama_dir):
    """transformers' logprob of each prompt token after the first, and the top 2 at each
    position (ids and logprobs)."""
    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float32)
    with torch.no_grad():
        logits = model(torch.tensor([PROMPT])).logits[0, :-1].float()
    logprobs = torch.log_softmax(logits, dim=-1)
    chosen = logprobs.gather(1, torch.tensor(PROMPT[1:])[:, None])[:, 0].tolist()
    top = logprobs.topk(2, dim=-1)
    return chosen, top.indices.tolist(), top.values.tolist()


def score(client, **body):
    return client.completions.create(model="tiny", prompt=PROMPT, echo=True, temperature=0,
                                     **body)


def check_prompt_logprobs(logprobs, reference, count: int) -> None:
    """The first `count` entries of a choice's arrays are the prompt's, as transformers
    scores it."""
    chosen, top_ids, top_values = reference
    assert logprobs.tokens[:count] == WORDS[:count]
    assert logprobs.token_logprobs[0] is None and logprobs.top_logprobs[0] is None
    assert logprobs.token_logprobs[1:count] == pytest.approx(chosen[:count - 1], abs=1e-4)
    for position, top in enumerate(logprobs.top_logprobs[1:count]):
        assert list(top) == [f"w{t}" for t in top_ids[position]]
        assert list(top.values()) == pytest.approx(top_values[position], abs=1e-4)
    assert logprobs.text_offset[:count] == [sum(len(w) for w in WORDS[:i])
                                            for i in range(count)]


def test_max_tokens_0_scores_the_prompt_alone(client, server, reference):
    for _ in range(2):  # the second time with the prompt's blocks in the prefix cache
        answer = score(client, max_tokens=0, logprobs=2)
        choice = answer.choices[0]
        assert choice.text == " ".join(WORDS)
        assert choice.finish_reason == "length"
        check_prompt_logprobs(choice.logprobs, reference, len(PROMPT))
        assert len(choice.logprobs.tokens) == len(PROMPT)
        assert (answer.usage.prompt_tokens, answer.usage.completion_tokens) == (len(PROMPT), 0)
    wait_idle(server)


def test_echo_puts_the_prompt_before_the_output(client, reference):
    plain = client.completions.create(model="tiny", prompt=PROMPT, temperature=0,
                                      max_tokens=4, logprobs=2,
                                      extra_body={"ignore_eos": True})
    echoed = score(client, max_tokens=4, logprobs=2, extra_body={"ignore_eos": True})
    choice = echoed.choices[0]
    assert choice.text == " ".join(WORDS) + plain.choices[0].text
    check_prompt_logprobs(choice.logprobs, reference, len(PROMPT))
    assert choice.logprobs.tokens[len(PROMPT):] == plain.choices[0].logprobs.tokens
    assert choice.logprobs.token_logprobs[len(PROMPT):] == \
        plain.choices[0].logprobs.token_logprobs
    prompt_chars = sum(len(w) for w in WORDS)
    assert choice.logprobs.text_offset[len(PROMPT):] == \
        [prompt_chars + offset for offset in plain.choices[0].logprobs.text_offset]
    assert echoed.usage.completion_tokens == 4


def test_echo_without_logprobs_and_of_a_text_prompt(client):
    answer = client.completions.create(model="tiny", prompt="w30 w31", echo=True,
                                       max_tokens=2, temperature=0,
                                       extra_body={"ignore_eos": True})
    assert answer.choices[0].text.startswith("w30 w31")
    assert answer.choices[0].logprobs is None


def test_a_streamed_echo_starts_with_the_prompt(client, reference):
    whole = score(client, max_tokens=3, logprobs=2, extra_body={"ignore_eos": True})
    chunks = [c for c in score(client, max_tokens=3, logprobs=2, stream=True,
                               extra_body={"ignore_eos": True}) if c.choices]
    first = chunks[0].choices[0]
    assert first.text == " ".join(WORDS)
    check_prompt_logprobs(first.logprobs, reference, len(PROMPT))
    assert "".join(c.choices[0].text for c in chunks) == whole.choices[0].text
    streamed = [t for c in chunks if c.choices[0].logprobs
                for t in c.choices[0].logprobs.token_logprobs]
    assert streamed == whole.choices[0].logprobs.token_logprobs
    offsets = [o for c in chunks if c.choices[0].logprobs
               for o in c.choices[0].logprobs.text_offset]
    assert offsets == whole.choices[0].logprobs.text_offset
    only = [c for c in score(client, max_tokens=0, stream=True) if c.choices]
    assert [c.choices[0].text for c in only] == [" ".join(WORDS), ""]
    assert only[-1].choices[0].finish_reason == "length"


def test_max_tokens_0_without_echo_is_refused(client):
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model="tiny", prompt=PROMPT, max_tokens=0)
    assert info.value.body["param"] == "max_tokens"


def test_echo_through_the_router(tiny_llama_dir, replicas, reference):
    running = router_over(replicas, make_placement("round_robin"), model=tiny_llama_dir,
                          http_port=0, served_model_name="tiny")
    try:
        with openai.OpenAI(base_url=f"http://{running.http_address}/v1", api_key="unused",
                           max_retries=0) as client:
            choice = score(client, max_tokens=0, logprobs=2).choices[0]
            streamed = [c for c in score(client, max_tokens=0, logprobs=2, stream=True)
                        if c.choices]
        assert choice.text == " ".join(WORDS)
        check_prompt_logprobs(choice.logprobs, reference, len(PROMPT))
        check_prompt_logprobs(streamed[0].choices[0].logprobs, reference, len(PROMPT))
    finally:
        running.stop(grace=0)
