"""The official `openai` SDK, unchanged, against the HTTP door on the tiny model: chat and
completions, streamed and not, with greedy token ids equal to transformers'; program
identity by `extra_body` and by `X-Program-Id` landing in one program, its class by
`X-Program-Class` or `program_class`; the calls' `ttft_slo_seconds`; n parallel choices."""

from __future__ import annotations

import json
import socket
import time
import urllib.request

import openai
import pytest
import torch
from grpc_helpers import live_ttft_slos, server_config, wait_idle
from agentix_testing.tiny_llama import hf_greedy
from transformers import AutoModelForCausalLM, AutoTokenizer

from server.app import start_server

MESSAGES = [{"role": "system", "content": "w20 w21 w22 w23 w24 w25 w26 w27"},
            {"role": "user", "content": "w30 w31 w32"}]  # 15 tokens with the markers
NEW_TOKENS = 6


@pytest.fixture(scope="module")
def http_server(tiny_llama_dir):
    server = start_server(server_config(tiny_llama_dir, enable_prefix_caching=True,
                                        ttft_slo_tokens=None),  # no deadline of its own
                          port=None, http_port=0, served_model_name="tiny")
    yield server
    server.stop(grace=0)


@pytest.fixture(scope="module")
def client(http_server):
    with openai.OpenAI(base_url=f"http://{http_server.http_address}/v1", api_key="unused",
                       max_retries=0) as client:
        yield client


@pytest.fixture(scope="module")
def reference(tiny_llama_dir):
    """transformers' greedy continuation of a prompt (token ids), EOS ignored."""
    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir, torch_dtype=torch.float32)
    return lambda prompt: hf_greedy(model, prompt, NEW_TOKENS)


@pytest.fixture(scope="module")
def chat_ids(tiny_llama_dir):
    ids = AutoTokenizer.from_pretrained(tiny_llama_dir).apply_chat_template(
        MESSAGES, add_generation_prompt=True, tokenize=True)
    return list(ids["input_ids"] if hasattr(ids, "keys") else ids)


GREEDY = {"temperature": 0, "max_tokens": NEW_TOKENS}
EXTRA = {"ignore_eos": True, "return_token_ids": True}


def get_json(server, path: str) -> dict:
    with urllib.request.urlopen(f"http://{server.http_address}{path}") as response:
        return json.loads(response.read())


def test_chat_completion_matches_transformers(client, reference, chat_ids, tiny_llama_dir):
    response = client.chat.completions.create(model="tiny", messages=MESSAGES, **GREEDY,
                                              extra_body=EXTRA)
    choice = response.choices[0]
    expected = reference(chat_ids)
    assert choice.model_extra["token_ids"] == expected
    tokenizer = AutoTokenizer.from_pretrained(tiny_llama_dir)
    text = tokenizer.decode(expected, skip_special_tokens=True)
    assert (choice.message.role, choice.message.content, choice.finish_reason) == (
        "assistant", text, "length")
    assert (response.usage.prompt_tokens, response.usage.completion_tokens) == (
        len(chat_ids), NEW_TOKENS)
    assert response.object == "chat.completion" and response.model == "tiny"


def test_streamed_chat_matches_and_reports_usage(client, reference, chat_ids):
    stream = client.chat.completions.create(model="tiny", messages=MESSAGES, stream=True,
                                            stream_options={"include_usage": True}, **GREEDY,
                                            extra_body=EXTRA)
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    ids = [t for c in chunks for choice in c.choices for t in choice.model_extra["token_ids"]]
    assert ids == reference(chat_ids)
    finals = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finals[-1] == "length" and set(finals[:-1]) == {None}
    assert not chunks[-1].choices and chunks[-1].usage.completion_tokens == NEW_TOKENS
    assert chunks[-1].usage.prompt_tokens == len(chat_ids)
    # The second identical chat hits the prefix cache: its first whole block (8 tokens).
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens == 8


def test_completions_with_token_ids_and_text(client, reference):
    prompt = [1, 40, 41, 42, 43]
    response = client.completions.create(model="tiny", prompt=prompt, **GREEDY,
                                         extra_body=EXTRA)
    assert response.choices[0].model_extra["token_ids"] == reference(prompt)
    streamed = client.completions.create(model="tiny", prompt="w40 w41 w42 w43", stream=True,
                                         **GREEDY, extra_body=EXTRA)
    pieces = list(streamed)
    ids = [t for c in pieces for choice in c.choices for t in choice.model_extra["token_ids"]]
    assert ids == reference([40, 41, 42, 43])
    assert "".join(c.choices[0].text for c in pieces if c.choices) == " ".join(
        f"w{t}" for t in ids)


@pytest.mark.parametrize("stream", [False, True])
def test_batched_prompts_get_n_choices_each_in_order(client, reference, stream):
    """Prompt i's choices are i*n .. i*n+n-1, as on vLLM; greedy choices of one prompt agree
    with transformers."""
    prompts = [[1, 40, 41], [1, 50, 51, 52], [1, 60]]
    response = client.completions.create(model="tiny", prompt=prompts, n=2, stream=stream,
                                         **GREEDY, extra_body=EXTRA)
    ids: dict[int, list[int]] = {}
    for choice in ([c for chunk in response for c in chunk.choices] if stream
                   else response.choices):
        ids.setdefault(choice.index, []).extend(choice.model_extra["token_ids"])
    assert sorted(ids) == list(range(6))
    for index, token_ids in ids.items():
        assert token_ids == reference(prompts[index // 2]), index


@pytest.mark.parametrize("stream", [False, True])
def test_batched_usage_counts_every_prompt_once_and_every_choice(client, stream):
    """As on vLLM: prompt_tokens (and cached_tokens) sum each prompt once, completion_tokens
    every choice. A 10- and an 11-token prompt, n=2, 6 tokens each, sent twice: the second
    time each prompt's first block (8 tokens) is in the prefix cache."""
    prompts = [[1, *range(70, 79)], [1, *range(80, 90)]]
    options = {"stream_options": {"include_usage": True}} if stream else {}
    for _ in range(2):
        response = client.completions.create(model="tiny", prompt=prompts, n=2, stream=stream,
                                             **options, **GREEDY, extra_body=EXTRA)
        got = [chunk.usage for chunk in response][-1] if stream else response.usage
    assert (got.prompt_tokens, got.completion_tokens, got.total_tokens) == (21, 24, 45)
    assert got.prompt_tokens_details.cached_tokens == 16


def test_a_batch_past_the_calls_bound_is_a_400_naming_prompt(client):
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model="tiny", prompt=["w5"] * 5, n=16, max_tokens=1)
    assert info.value.body["param"] == "prompt"


def test_extra_body_and_header_land_in_one_program(client, http_server):
    client.chat.completions.create(model="tiny", messages=MESSAGES, **GREEDY,
                                   extra_body={**EXTRA, "program_id": "agent-7",
                                               "thread_id": "plan"})
    client.chat.completions.create(model="tiny", messages=MESSAGES, **GREEDY, extra_body=EXTRA,
                                   extra_headers={"X-Program-Id": "agent-7"})
    client.completions.create(model="tiny", prompt=[1, 5], **GREEDY, extra_body=EXTRA,
                              extra_headers={"X-Session-Id": "agent-7"})
    record = get_json(http_server, "/v1/programs/agent-7")
    assert (record["program_id"], record["state"], record["num_calls"]) == (
        "agent-7", "active", 3)
    assert record["generated_tokens"] == 3 * NEW_TOKENS
    request = urllib.request.Request(f"http://{http_server.http_address}/v1/programs/agent-7:end",
                                     method="POST")
    with urllib.request.urlopen(request) as response:
        ended = json.loads(response.read())
    assert (ended["state"], ended["num_calls"]) == ("completed", 3)
    http_server.engine_loop.call(lambda engine: engine.check_integrity())


def test_without_infer_programs_a_chat_naming_no_program_is_a_one_call_program(client):
    first = client.chat.completions.create(model="tiny", messages=MESSAGES, **GREEDY)
    history = [*MESSAGES, {"role": "assistant", "content": first.choices[0].message.content},
               {"role": "user", "content": "w40"}]
    second = client.chat.completions.create(model="tiny", messages=history, **GREEDY)
    assert first.model_extra["program_id"] == "" == second.model_extra["program_id"]


def test_program_class_from_the_body_or_the_header_which_wins(client, http_server):
    """An implicitly started program takes its class from the body, or from the
    X-Program-Class header over the body; a program that exists keeps its class."""
    def stored(program_id: str) -> str | None:
        return http_server.engine_loop.call(
            lambda engine: engine.get_program(program_id).program_class)

    for program_id, body, headers in (
            ("by-body", {"program_class": "lats"}, {}),
            ("by-header", {}, {"X-Program-Class": "react"}),
            ("both", {"program_class": "lats"}, {"X-Program-Class": "react"})):
        client.completions.create(model="tiny", prompt=[1, 5], **GREEDY,
                                  extra_body={**EXTRA, "program_id": program_id, **body},
                                  extra_headers=headers)
    assert [stored(p) for p in ("by-body", "by-header", "both")] == ["lats", "react", "react"]
    assert get_json(http_server, "/v1/programs/both")["program_class"] == "react"
    client.completions.create(model="tiny", prompt=[1, 5], **GREEDY, extra_body=EXTRA,
                              extra_headers={"X-Program-Id": "both",
                                             "X-Program-Class": "other"})
    record = get_json(http_server, "/v1/programs/both")
    assert (record["program_class"], record["num_calls"]) == ("react", 2)
    for program_id in ("by-body", "by-header", "both"):
        http_server.engine_loop.call(lambda engine, p=program_id: engine.end_program(p))


def test_ttft_slo_seconds_is_the_first_token_deadline_of_the_calls(client, http_server):
    """The body's ttft_slo_seconds (chat or completions) is the live call's first-token
    deadline; a call without it has the engine's (none on this server)."""
    timed = client.chat.completions.create(  # max_tokens: the rest of the context
        model="tiny", messages=MESSAGES, stream=True,
        extra_body={"ignore_eos": True, "program_id": "slo", "ttft_slo_seconds": 0.75})
    untimed = client.completions.create(model="tiny", prompt=[1, 5], max_tokens=250,
                                        stream=True,
                                        extra_body={"ignore_eos": True, "program_id": "slo"})
    assert live_ttft_slos(http_server, "slo") == [0.75, None]
    for stream in (timed, untimed):
        stream.close()
    http_server.engine_loop.call(lambda engine: engine.end_program("slo"))
    wait_idle(http_server)


def test_n_choices_run_as_threads_of_one_program(client, http_server, reference, chat_ids):
    response = client.chat.completions.create(model="tiny", messages=MESSAGES, n=3, **GREEDY,
                                              extra_body={**EXTRA, "program_id": "fanout"})
    assert [c.index for c in response.choices] == [0, 1, 2]
    assert all(c.model_extra["token_ids"] == reference(chat_ids) for c in response.choices)
    record = get_json(http_server, "/v1/programs/fanout")
    assert record["num_calls"] == 3 and record["generated_tokens"] == 3 * NEW_TOKENS
    assert response.usage.completion_tokens == 3 * NEW_TOKENS
    # Without a named program the n choices get one of their own, ended with the request.
    programs = http_server.engine_loop.call(lambda engine: engine.stats().load.programs_active)
    client.chat.completions.create(model="tiny", messages=MESSAGES, n=2, **GREEDY)
    assert http_server.engine_loop.call(
        lambda engine: engine.stats().load.programs_active) == programs


def test_models_and_health(client, http_server):
    assert [m.id for m in client.models.list().data] == ["tiny"]
    assert get_json(http_server, "/health") == {"status": "ok"}


@pytest.mark.parametrize("stream", [False, True])
def test_a_client_that_goes_away_aborts_its_call(http_server, stream):
    """A raw socket sends a long call and closes once it is running (streamed: after the
    first chunk); the call is aborted and every block comes back."""
    host, port = http_server.http_address.rsplit(":", 1)
    body = json.dumps({"prompt": [1, 5, 6], "max_tokens": 200, "temperature": 0,
                       "ignore_eos": True, "stream": stream}).encode()
    loop = http_server.engine_loop
    idle_used = loop.call(lambda engine: engine.stats().kv_blocks_used)
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                     b"application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        if stream:
            assert sock.recv(65536).startswith(b"HTTP/1.1 200")
        deadline = time.monotonic() + 10
        while loop.call(lambda engine: engine.stats().load.calls_running) == 0:
            assert time.monotonic() < deadline
            time.sleep(0.01)
    deadline = time.monotonic() + 10
    while loop.call(lambda engine: engine.stats().load.calls_running):
        assert time.monotonic() < deadline, "the call kept running after its client left"
        time.sleep(0.02)
    assert loop.call(lambda engine: engine.stats().kv_blocks_used) == idle_used
    loop.call(lambda engine: engine.check_integrity())
