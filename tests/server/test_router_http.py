"""The OpenAI door on the router (`start_router(http_port=...)`), two in-process replicas
behind it: greedy tokens equal transformers', streamed as on one server; program identity
in the router's records, the program on the replica it was placed on, ended everywhere;
a request's n choices as a program of its own; a client that goes away aborts its call on
the replica; the replicas' refusals relayed with OpenAI's body; a replica lost before a call
streams is failed over; tool calls and reasoning parsed by the router's door with the
openai SDK (a reasoning parser needs the router's model, with the markers); auth as
on one server (tenant namespaces, the client's token forwarded); a chain of stored
Responses as one program from its second response on (an ended one replaced, past the
router's program cap a one-call program)."""

from __future__ import annotations

import contextlib
import json
import urllib.error
import urllib.request
from typing import Iterator

import openai
import pytest
import torch
from grpc_helpers import wait_idle
from reasoning_model import REASONING
from router_helpers import TOKEN, in_process_replicas, router_over, wait_until
from agentix_testing.tiny_llama import hf_greedy
from tool_call_model import CALL_ARGUMENTS, CALL_TEXT
from transformers import AutoModelForCausalLM

from scheduler.config import SchedulerConfig
from scheduler.placement import make_placement
from server.router import start_router
from server.router.app import RouterOptions, RunningRouter

PROMPT = [5, 9, 14, 3, 27, 8, 11, 40, 2, 17]
NEW_TOKENS = 6
GREEDY = {"temperature": 0, "max_tokens": NEW_TOKENS}
EXTRA = {"ignore_eos": True, "return_token_ids": True}


@pytest.fixture(scope="module")
def router(replicas, tiny_llama_dir):
    running = router_over(replicas, make_placement("round_robin"), model=tiny_llama_dir,
                          http_port=0, served_model_name="tiny-llama")
    yield running
    running.stop(grace=0)


@pytest.fixture(scope="module")
def client(router):
    with openai.OpenAI(base_url=f"http://{router.http_address}/v1", api_key="unused",
                       max_retries=0) as client:
        yield client


@pytest.fixture
def idle(replicas, router):
    yield
    wait_until(lambda: router.call(lambda: not router.router.calls), what="router idle")
    for server in replicas:
        wait_idle(server)


def post(router, path: str, body: dict, headers: dict | None = None) -> tuple[int, dict]:
    request = urllib.request.Request(
        f"http://{router.http_address}{path}", data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def get(router, path: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(f"http://{router.http_address}{path}", timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def calls_on(server, program_id: str) -> int | None:
    """The program's calls on a replica's engine (None: no active program there)."""
    table = server.engine_loop.call(lambda engine: engine.scheduler.table)
    return server.engine_loop.call(
        lambda engine: table.get(program_id).num_calls if program_id in table else None)


def test_greedy_tokens_equal_transformers_streamed_or_not(client, tiny_llama_dir, idle):
    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir, torch_dtype=torch.float32)
    expected = hf_greedy(model, PROMPT, NEW_TOKENS)
    whole = client.completions.create(model="tiny-llama", prompt=PROMPT, extra_body=EXTRA,
                                      **GREEDY)
    assert whole.choices[0].model_extra["token_ids"] == expected
    assert whole.usage.prompt_tokens == len(PROMPT)
    assert whole.usage.completion_tokens == NEW_TOKENS
    chunks = list(client.completions.create(model="tiny-llama", prompt=PROMPT, stream=True,
                                            extra_body=EXTRA, **GREEDY))
    streamed = [t for c in chunks if c.choices for t in c.choices[0].model_extra["token_ids"]]
    assert streamed == expected
    assert "".join(c.choices[0].text for c in chunks if c.choices) == whole.choices[0].text
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"


def test_a_named_program_lives_in_the_routers_records_and_ends_everywhere(
        router, replicas, client, idle):
    for _ in range(2):
        client.completions.create(model="tiny-llama", prompt=PROMPT, extra_body=EXTRA,
                                  extra_headers={"X-Program-Id": "agent-1",
                                                 "X-Program-Class": "coder"}, **GREEDY)
    status, record = get(router, "/v1/programs/agent-1")
    assert status == 200
    assert (record["program_id"], record["num_calls"], record["program_class"]) == \
        ("agent-1", 2, "coder")
    assert record["generated_tokens"] == 2 * NEW_TOKENS
    # round_robin: one call on each replica, the program started on both
    assert [calls_on(s, "agent-1") for s in replicas] == [1, 1]
    status, ended = post(router, "/v1/programs/agent-1:end", {})
    assert (status, ended["state"], ended["num_calls"]) == (200, "completed", 2)
    assert [calls_on(s, "agent-1") for s in replicas] == [None, None]
    assert get(router, "/v1/programs/nope")[0] == 404


def test_n_choices_run_as_a_program_of_their_own_ended_with_the_request(
        router, client, idle):
    answer = client.completions.create(model="tiny-llama", prompt=PROMPT, n=2,
                                       extra_body=EXTRA, **GREEDY)
    assert [c.index for c in answer.choices] == [0, 1]
    assert answer.choices[0].text == answer.choices[1].text  # greedy
    assert router.call(lambda: len(router.router.programs.table)) == 0


def respond(client, **body):
    return client.responses.create(model="tiny-llama", input="w5", temperature=0,
                                   max_output_tokens=4, **body)


def test_a_chain_of_stored_responses_is_one_program_in_the_routers_records(
        router, client, idle):
    first = respond(client)
    assert first.model_extra["program_id"] is None  # a one-call program: nothing lingers
    assert router.call(lambda: len(router.router.programs.table)) == 0
    second = respond(client, previous_response_id=first.id)
    third = respond(client, previous_response_id=second.id)
    fork = respond(client, previous_response_id=first.id)
    # w7 w5 w8 <the first answer> w7 w5 w9: the stored conversation, then the new input
    assert second.usage.input_tokens == 6 + len(first.output_text.split())
    program = second.model_extra["program_id"]
    assert program.startswith("prog-")
    assert [r.model_extra["program_id"] for r in (third, fork)] == [program, program]
    assert get(router, f"/v1/programs/{program}")[1]["num_calls"] == 3
    assert client.responses.retrieve(second.id).model_dump() == second.model_dump()
    assert post(router, f"/v1/programs/{program}:end", {})[0] == 200
    after = respond(client, previous_response_id=third.id)  # its program ended: a new one
    renewed = after.model_extra["program_id"]
    assert renewed.startswith("prog-") and renewed != program
    assert get(router, f"/v1/programs/{renewed}")[1]["num_calls"] == 1
    assert post(router, f"/v1/programs/{renewed}:end", {})[0] == 200


def test_past_the_routers_program_cap_a_chain_goes_on_in_one_call_programs(
        replicas, tiny_llama_dir):
    capped = router_over(replicas, make_placement("round_robin"), model=tiny_llama_dir,
                         http_port=0, served_model_name="tiny-llama",
                         scheduler=SchedulerConfig(max_programs_per_tenant=1))
    try:
        wait_until(lambda: get(capped, "/health")[0] == 200, what="a healthy replica")
        with openai.OpenAI(base_url=f"http://{capped.http_address}/v1", api_key="unused",
                           max_retries=0) as client:
            first = respond(client)
            named = respond(client, store=False, extra_headers={"X-Program-Id": "capper"})
            assert named.model_extra["program_id"] == "capper"  # the cap is reached
            second = respond(client, previous_response_id=first.id)
            assert second.model_extra["program_id"] is None
            assert client.responses.retrieve(second.id).id == second.id
            assert post(capped, "/v1/programs/capper:end", {})[0] == 200
            third = respond(client, previous_response_id=second.id)
        program = third.model_extra["program_id"]
        assert program.startswith("prog-")
        assert capped.call(lambda: [r.program_id for r in
                                    capped.router.programs.table.top_by_service(10)]) == \
            [program]
    finally:
        capped.stop(grace=0)
    for server in replicas:
        wait_idle(server)


def test_a_client_that_goes_away_aborts_its_call_on_the_replica(router, client, replicas,
                                                                 idle):
    stream = client.completions.create(model="tiny-llama", prompt=PROMPT, stream=True,
                                       temperature=0, max_tokens=400,
                                       extra_body={"ignore_eos": True})
    next(iter(stream))
    stream.close()
    # the idle fixture checks that neither the router nor a replica holds anything


def test_refusals_come_back_in_openais_body(router, idle):
    status, body = post(router, "/v1/completions", {"model": "tiny-llama", "prompt": PROMPT,
                                                    "max_tokens": -1})
    assert (status, body["error"]["param"]) == (400, "max_tokens")
    status, body = post(router, "/v1/completions", {"model": "other", "prompt": PROMPT})
    assert (status, body["error"]["code"]) == (404, "model_not_found")
    status, body = post(router, "/v1/completions", {"model": "tiny-llama",
                                                    "prompt": [1] * 5000})
    assert (status, body["error"]["param"]) == (400, "prompt")
    status, body = post(router, "/v1/completions", {"model": "tiny-llama", "prompt": PROMPT},
                        {"X-Program-Id": "bad id"})
    assert (status, body["error"]["param"]) == (400, "program_id")
    assert get(router, "/health") == (200, {"status": "ok"})
    status, models = get(router, "/v1/models")
    assert [m["id"] for m in models["data"]] == ["tiny-llama"]


def test_a_replica_lost_before_the_call_streams_is_failed_over(tiny_llama_dir):
    servers = in_process_replicas(tiny_llama_dir)
    # Polls too rare to notice a stop: only the calls' failures tell the router.
    running = start_router(replicas=[s.address for s in servers], router_token=TOKEN,
                           placement=make_placement("round_robin"), model=tiny_llama_dir,
                           http_port=0, served_model_name="tiny-llama", poll_seconds=60)
    body = {"model": "tiny-llama", "prompt": PROMPT, **GREEDY, **EXTRA}
    try:
        servers[0].stop(grace=0)  # round_robin sends the first call there
        answers = [post(running, "/v1/completions", body) for _ in range(2)]
        assert [status for status, _ in answers] == [200, 200]
        assert running.call(lambda: running.router.retried) == 1
        assert answers[0][1]["choices"][0]["token_ids"] == \
            answers[1][1]["choices"][0]["token_ids"]
        servers[1].stop(grace=0)
        status, error = post(running, "/v1/completions", body)
        assert (status, error["error"]["type"]) == (503, "service_unavailable")
        status, error = get(running, "/health")
        assert (status, error["error"]["message"]) == (503, "no replica is serving")
    finally:
        running.stop(grace=0)
        for server in servers:
            server.stop(grace=0)


TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}]


@contextlib.contextmanager
def door_client(model_dir: str, **options) -> Iterator[openai.OpenAI]:
    """An openai client of a router's door (the hermes tool parser, and `options`) in front
    of one in-process replica over `model_dir`."""
    servers = in_process_replicas(model_dir, count=1)
    running = router_over(servers, make_placement("round_robin"), model=model_dir,
                          http_port=0, tool_call_parser="hermes", **options)
    try:
        with openai.OpenAI(base_url=f"http://{running.http_address}/v1", api_key="unused",
                           max_retries=0) as client:
            yield client
    finally:
        running.stop(grace=0)
        for server in servers:
            server.stop(grace=0)


def chat(client: openai.OpenAI, **body):
    return client.chat.completions.create(
        model=client.models.list().data[0].id, messages=[{"role": "user", "content": "hello"}],
        temperature=0, max_tokens=32, **body)


def test_tool_calls_are_parsed_by_the_routers_door(tool_call_model_dir):
    with door_client(tool_call_model_dir) as client:
        chunks = list(chat(client, tools=TOOLS, stream=True))
    calls = [d.tool_calls[0] for c in chunks if c.choices
             for d in [c.choices[0].delta] if d.tool_calls]
    assert calls[0].function.name == "get_weather"
    assert "".join(c.function.arguments or "" for c in calls) == CALL_ARGUMENTS
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"


def test_reasoning_is_split_by_the_routers_door(reasoning_model_dir):
    with door_client(reasoning_model_dir, reasoning_parser="qwen3") as client:
        answer = chat(client, tools=TOOLS).choices[0].message
        off = chat(client, extra_body={"chat_template_kwargs": {"enable_thinking": False}}
                   ).choices[0].message
    assert (answer.reasoning_content, answer.content) == (REASONING, None)
    assert [(c.function.name, c.function.arguments) for c in answer.tool_calls] == [
        ("get_weather", CALL_ARGUMENTS)]
    assert (getattr(off, "reasoning_content", None), off.content) == (None, CALL_TEXT)


def test_a_reasoning_parser_needs_the_routers_model_with_its_markers(tool_call_model_dir):
    with pytest.raises(ValueError, match="^reasoning_parser: needs model"):
        RouterOptions(replicas=("127.0.0.1:1",), reasoning_parser="qwen3")
    with pytest.raises(ValueError, match="^unknown reasoning parser 'qwen'"):
        RouterOptions(replicas=("127.0.0.1:1",), model=tool_call_model_dir,
                      reasoning_parser="qwen")
    with pytest.raises(ValueError) as info:
        RunningRouter(RouterOptions(replicas=("127.0.0.1:1",), model=tool_call_model_dir,
                                    reasoning_parser="qwen3"))
    assert str(info.value) == ("reasoning_parser: reasoning parser 'qwen3' needs '<think>' as "
                               "one token, and the model's vocabulary has no such token")


def test_auth_through_the_routers_door(tiny_llama_dir):
    tokens = {"tok-a": "alice", "tok-b": "bob"}
    servers = in_process_replicas(tiny_llama_dir, auth_tokens=tokens)
    running = router_over(servers, make_placement("round_robin"), model=tiny_llama_dir,
                          http_port=0, served_model_name="tiny-llama", auth_tokens=tokens)
    body = {"model": "tiny-llama", "prompt": PROMPT, **GREEDY, **EXTRA}

    def as_(token: str | None, path: str = "/v1/completions", **headers):
        auth = {"Authorization": f"Bearer {token}"} if token else {}
        return post(running, path, body, {**auth, **headers})

    try:
        status, error = as_(None)
        assert (status, error["error"]["code"]) == (401, "invalid_api_key")
        for _ in range(2):
            assert as_("tok-a", **{"X-Program-Id": "shared-name"})[0] == 200
        assert as_("tok-b", **{"X-Program-Id": "shared-name"})[0] == 200  # its own
        assert running.call(lambda: sorted(
            (r.program_id, r.tenant, r.num_calls)
            for r in running.router.programs.table.top_by_service(10))) == \
            [("alice/shared-name", "alice", 2), ("bob/shared-name", "bob", 1)]
        status, ended = as_("tok-a", "/v1/programs/shared-name:end")
        assert (status, ended["program_id"], ended["tenant"]) == (200, "shared-name", "alice")
        for server in servers:  # the replicas saw alice's token: her namespace
            assert server.engine_loop.call(
                lambda e: e.scheduler.table.is_recently_ended("alice/shared-name"))
        assert as_("tok-b", "/v1/programs/shared-name:end")[0] == 200
    finally:
        running.stop(grace=0)
        for server in servers:
            server.stop(grace=0)
