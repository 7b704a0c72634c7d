"""The OpenAI HTTP door's errors: each status (400, 401, 403, 404, 409, 429, 503) with
OpenAI's body `{"error": {"message", "type", "param", "code"}}` and a message naming what
is wrong; after each, the server still serves the same greedy tokens, leaks no block and
passes its integrity check."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from typing import Any, Iterator

import pytest
from grpc_helpers import server_config, wait_idle

from server.app import start_server

TOKEN_A, TOKEN_B = "tok-a", "tok-b"
TOKENS = {TOKEN_A: "team-a", TOKEN_B: "team-b"}
ERROR_KEYS = {"message", "type", "param", "code"}
GREEDY = {"prompt": [1, 5, 6, 7], "max_tokens": 8, "temperature": 0, "ignore_eos": True,
          "return_token_ids": True}
LONG_TOKENS = 240  # a long greedy stream: about half a second of decoding on CPU


# ----- HTTP plumbing ------------------------------------------------------------------

def http(server, method: str, path: str, body: Any = None, token: str | None = None,
         headers: dict[str, str] | None = None, raw: bytes | None = None,
         timeout: float = 30.0) -> tuple[int, Any]:
    """(status, parsed JSON body, or the raw text when it is not JSON)."""
    data = raw if raw is not None else None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"http://{server.http_address}{path}", data=data,
                                     method=method)
    request.add_header("Content-Type", "application/json")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    for key, value in (headers or {}).items():
        request.add_header(key, value)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            status, text = response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        status, text = error.code, error.read().decode()
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


class SSE:
    """A streamed completion: `chunks()` yields each `data:` payload until `[DONE]` (then
    `done`); a read waits at most `timeout` seconds."""

    def __init__(self, server, path: str, body: dict[str, Any], token: str | None = None,
                 headers: dict[str, str] | None = None, timeout: float = 60.0) -> None:
        request = urllib.request.Request(f"http://{server.http_address}{path}",
                                         data=json.dumps({**body, "stream": True}).encode(),
                                         method="POST")
        request.add_header("Content-Type", "application/json")
        if token is not None:
            request.add_header("Authorization", f"Bearer {token}")
        for key, value in (headers or {}).items():
            request.add_header(key, value)
        self.response = urllib.request.urlopen(request, timeout=timeout)
        assert self.response.status == 200
        self.done = False

    def chunks(self) -> Iterator[dict[str, Any]]:
        for line in self.response:
            line = line.decode().strip()
            if not line.startswith("data: "):
                continue
            if line == "data: [DONE]":
                self.done = True
                return
            yield json.loads(line[len("data: "):])

    def close(self) -> None:
        self.response.close()


def first_tokens(sse: SSE) -> tuple[str, list[int], Iterator[dict[str, Any]]]:
    """(call id, token ids so far, the rest of the chunks) once a token has arrived."""
    chunks = sse.chunks()
    for chunk in chunks:
        ids = [t for c in chunk["choices"] for t in c.get("token_ids", [])]
        if ids:
            return chunk["id"].split("-", 1)[1], ids, chunks
    raise AssertionError("the stream ended before its first token")


def assert_error(status: int, body: Any, expected: int, error_type: str,
                 words: tuple[str, ...], param: Any = ..., code: Any = ...) -> dict[str, Any]:
    """OpenAI's error body with `expected` status; the message contains every word."""
    assert status == expected, body
    assert isinstance(body, dict) and set(body) == {"error"}, body
    error = body["error"]
    assert set(error) == ERROR_KEYS, error
    assert error["type"] == error_type, error
    assert isinstance(error["message"], str) and error["message"], error
    for word in words:
        assert word in error["message"], (word, error)
    if param is not ...:
        assert error["param"] == param, error
    if code is not ...:
        assert error["code"] == code, error
    return error


# ----- server state checks ------------------------------------------------------------

def greedy(server, token: str | None = None) -> list[int]:
    status, body = http(server, "POST", "/v1/completions", GREEDY, token)
    assert status == 200, body
    return body["choices"][0]["token_ids"]


def assert_healthy(server, baseline: list[int], token: str | None = None) -> None:
    """The server still answers the baseline greedy call with the same tokens, and is
    clean once idle."""
    wait_idle(server)
    assert greedy(server, token) == baseline
    wait_idle(server)


def call_state(server, call_id: str) -> tuple[bool, int]:
    """(the call still runs, its tokens left) as the engine sees it now."""
    def read(engine):
        call = engine.calls.get(call_id)
        return (call is not None and not call.is_finished,
                0 if call is None else call.num_remaining_tokens)

    return server.engine_loop.call(read)


# ----- fixtures -----------------------------------------------------------------------

@pytest.fixture(scope="module")
def auth_server(tiny_llama_dir):
    """One HTTP server with auth on (tenants team-a and team-b) for this module."""
    server = start_server(server_config(tiny_llama_dir), port=None, http_port=0,
                          auth_tokens=TOKENS)
    yield server
    server.stop(grace=0)


@pytest.fixture(scope="module")
def baseline(auth_server) -> list[int]:
    tokens = greedy(auth_server, TOKEN_A)
    assert len(tokens) == GREEDY["max_tokens"]
    return tokens


def chat(**fields) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": "w10 w11"}], "max_tokens": 4,
            "temperature": 0, **fields}


def completion(**fields) -> dict[str, Any]:
    return {"prompt": "w10 w11", "max_tokens": 4, "temperature": 0, **fields}


# ----- 400 ----------------------------------------------------------------------------

BAD_REQUESTS = {
    # id: (path, body or raw bytes, param, words the message must contain)
    "temperature-out-of-range": ("/v1/chat/completions", chat(temperature=5),
                                 "temperature", ("temperature",)),
    "temperature-not-a-number": ("/v1/chat/completions", chat(temperature="hot"),
                                 "temperature", ("temperature",)),
    "top_p-zero": ("/v1/completions", completion(top_p=0), "top_p", ("top_p",)),
    "max_tokens-zero": ("/v1/completions", completion(max_tokens=0), "max_tokens",
                        ("max_tokens",)),
    "n-too-many": ("/v1/completions", completion(n=17), "n", ("n",)),
    "too-many-stop-strings": ("/v1/completions", completion(stop=[f"x{i}" for i in range(17)]),
                              "stop", ("stop", "16")),
    "token-outside-vocabulary": ("/v1/completions", completion(prompt=[1, 5, 999]),
                                 "prompt", ("999", "vocabulary")),
    "negative-token-id": ("/v1/completions", completion(prompt=[1, -1]), "prompt",
                          ("-1", "vocabulary")),
    "empty-prompt": ("/v1/completions", completion(prompt=""), "prompt", ("prompt", "empty")),
    "prompt-longer-than-context": ("/v1/completions", completion(prompt=[5] * 300), "prompt",
                                   ("300", "context")),
    "batch-past-the-calls-bound": ("/v1/completions",
                                   completion(prompt=["w10", "w11", "w12", "w13", "w14"], n=16),
                                   "prompt", ("prompt", "calls per request")),
    "missing-messages": ("/v1/chat/completions", {"max_tokens": 4}, "messages",
                         ("messages",)),
    "empty-messages": ("/v1/chat/completions", chat(messages=[]), "messages", ("messages",)),
    "unknown-role": ("/v1/chat/completions",
                     chat(messages=[{"role": "wizard", "content": "w10"}]),
                     "messages[0].role", ("role", "wizard")),
    "non-text-content-part": ("/v1/chat/completions",
                              chat(messages=[{"role": "user", "content": [
                                  {"type": "image_url", "image_url": {"url": "x"}}]}]),
                              "messages[0].content", ("content", "text")),
    "negative-expected_tool_seconds": ("/v1/completions",
                                       completion(expected_tool_seconds=-1),
                                       "expected_tool_seconds", ("expected_tool_seconds",)),
    "top-logprobs-chat": ("/v1/chat/completions", chat(logprobs=True, top_logprobs=21),
                          "top_logprobs", ("top_logprobs", "less than or equal to 20")),
    "top_logprobs-without-logprobs": ("/v1/chat/completions", chat(top_logprobs=2),
                                      "top_logprobs",
                                      ("top_logprobs: 2 alternatives need logprobs: true",)),
    "logprobs-completions": ("/v1/completions", completion(logprobs=6), "logprobs",
                             ("logprobs", "less than or equal to 5")),
    "max_tokens-0-without-echo": ("/v1/completions", completion(max_tokens=0), "max_tokens",
                                  ("max_tokens", "only with echo")),
    "presence_penalty": ("/v1/chat/completions", chat(presence_penalty=0.5),
                         "presence_penalty", ("presence_penalty", "not supported")),
    "logit_bias": ("/v1/completions", completion(logit_bias={"5": -100}), "logit_bias",
                   ("logit_bias", "not supported")),
    "best_of": ("/v1/completions", completion(best_of=2), "best_of",
                ("best_of", "not supported")),
    "response_format-xml": ("/v1/chat/completions", chat(response_format={"type": "xml"}),
                            "response_format.type", ("json_object", "json_schema", "'xml'")),
    "response_format-json_schema-without-schema": (
        "/v1/chat/completions",
        chat(response_format={"type": "json_schema", "json_schema": {"name": "x"}}),
        "response_format.json_schema.schema", ("JSON Schema",)),
    # this model's word-level tokenizer has no decoder: the grammar library cannot map its
    # tokens to bytes, so no output grammar can be compiled for it; the 400 names the field
    # that asked for one
    "response_format-json_object-on-a-tokenizer-without-bytes": (
        "/v1/chat/completions", chat(response_format={"type": "json_object"}),
        "response_format", ("response_format", "tokenizer")),
    "tool_choice-not-among-the-tools": (
        "/v1/chat/completions",
        chat(tools=[{"type": "function", "function": {"name": "f"}}],
             tool_choice={"type": "function", "function": {"name": "nope"}}),
        "tool_choice", ("'nope'", "not among the tools")),
    "tool_choice-required-without-tools": ("/v1/chat/completions",
                                           chat(tool_choice="required"), "tool_choice",
                                           ("tool_choice", "needs tools")),
    "tool_choice-malformed": ("/v1/chat/completions",
                              chat(tools=[{"type": "function", "function": {"name": "f"}}],
                                   tool_choice={"type": "auto"}),
                              "tool_choice", ("tool_choice", '"required"')),
    "program_class-with-a-space": ("/v1/completions",
                                   completion(program_id="classy", program_class="has space"),
                                   "program_class", ("program_class", "128 printable ASCII")),
    "malformed-json": ("/v1/chat/completions", b'{"messages": [{"role": "user",', None,
                       ("JSON",)),
    "body-not-an-object": ("/v1/chat/completions", [1, 2], None, ()),
}


@pytest.mark.parametrize("case", list(BAD_REQUESTS), ids=list(BAD_REQUESTS))
def test_400_invalid_request_names_the_field(auth_server, baseline, case):
    path, body, param, words = BAD_REQUESTS[case]
    raw = body if isinstance(body, bytes) else None
    status, answer = http(auth_server, "POST", path, None if raw else body, TOKEN_A, raw=raw)
    assert_error(status, answer, 400, "invalid_request_error", words, param=param)
    assert_healthy(auth_server, baseline, TOKEN_A)


@pytest.mark.parametrize("bad", ["c" * 129, "tab\there", ""], ids=["too-long", "tab", "empty"])
def test_400_bad_program_class_header_names_the_field(auth_server, baseline, bad):
    """A bad X-Program-Class is refused like a bad body field (even beside a good body
    class), and the program it would have started is not started."""
    status, answer = http(auth_server, "POST", "/v1/chat/completions",
                          chat(program_id="classy", program_class="fine"), TOKEN_A,
                          {"X-Program-Class": bad})
    assert_error(status, answer, 400, "invalid_request_error", ("program_class",),
                 param="program_class")
    status, answer = http(auth_server, "GET", "/v1/programs/classy", token=TOKEN_A)
    assert_error(status, answer, 404, "not_found_error", ("classy",))
    assert_healthy(auth_server, baseline, TOKEN_A)


BAD_TTFT_SLO = {  # id: (path, body)
    "chat-zero": ("/v1/chat/completions", chat(program_id="slo", ttft_slo_seconds=0.0)),
    "completions-negative": ("/v1/completions",
                             completion(program_id="slo", ttft_slo_seconds=-1.5)),
    "completions-past-a-day": ("/v1/completions",
                               completion(program_id="slo", ttft_slo_seconds=86_400.5)),
}


@pytest.mark.parametrize("case", list(BAD_TTFT_SLO), ids=list(BAD_TTFT_SLO))
def test_400_bad_ttft_slo_seconds_names_the_field(auth_server, baseline, case):
    """A first-token deadline outside (0, 86400] is refused naming it, and the program the
    request names is not started."""
    path, body = BAD_TTFT_SLO[case]
    status, answer = http(auth_server, "POST", path, body, TOKEN_A)
    message = f"ttft_slo_seconds must be in (0, 86400], got {body['ttft_slo_seconds']!r}"
    assert_error(status, answer, 400, "invalid_request_error", (message,),
                 param="ttft_slo_seconds")
    status, answer = http(auth_server, "GET", "/v1/programs/slo", token=TOKEN_A)
    assert_error(status, answer, 404, "not_found_error", ("slo",))
    assert_healthy(auth_server, baseline, TOKEN_A)


def test_400_stream_request_fails_before_streaming(auth_server, baseline):
    """A bad streamed request gets the JSON error, not an event stream."""
    status, answer = http(auth_server, "POST", "/v1/chat/completions",
                          chat(stream=True, temperature=5), TOKEN_A)
    assert_error(status, answer, 400, "invalid_request_error", ("temperature",),
                 param="temperature")
    assert_healthy(auth_server, baseline, TOKEN_A)


# ----- 401 ----------------------------------------------------------------------------

@pytest.mark.parametrize("authorization", [None, "Bearer nope", "Bearer ", "tok-a",
                                           "Basic tok-a"],
                         ids=["no-token", "unknown-token", "empty-token", "no-scheme",
                              "basic-scheme"])
def test_401_without_a_known_bearer_token(auth_server, baseline, authorization):
    headers = {} if authorization is None else {"Authorization": authorization}
    programs = auth_server.engine_loop.call(lambda e: e.stats().load.programs_active)
    for method, path, body in (("POST", "/v1/chat/completions", chat()),
                               ("POST", "/v1/completions", completion(stream=True)),
                               ("GET", "/v1/models", None),
                               ("GET", "/v1/programs/anything", None),
                               ("POST", "/v1/programs/anything:end", None)):
        status, answer = http(auth_server, method, path, body, headers=headers)
        assert_error(status, answer, 401, "authentication_error", ("bearer token",),
                     param=None, code="invalid_api_key")
    # /metrics and /health need no token
    for path in ("/metrics", "/health"):
        status, _ = http(auth_server, "GET", path, headers=headers)
        assert status == 200, path
    # nothing was started for nobody
    assert auth_server.engine_loop.call(lambda e: e.stats().load.programs_active) == programs
    assert_healthy(auth_server, baseline, TOKEN_A)


# ----- 403 ----------------------------------------------------------------------------

def test_another_tenants_program_is_not_found(auth_server, baseline):
    """Ids live in the caller's namespace: B cannot read or end A's program (404, the body
    a missing program gets: no existence oracle), and B naming the same id gets a program of
    its own, leaving A's untouched."""
    pid = "prog-of-a"
    status, answer = http(auth_server, "POST", "/v1/chat/completions", chat(), TOKEN_A,
                          {"X-Program-Id": pid})
    assert status == 200 and answer["program_id"] == pid, answer
    missing = http(auth_server, "GET", "/v1/programs/never-started", token=TOKEN_B)[1]
    for method, path in (("GET", f"/v1/programs/{pid}"), ("POST", f"/v1/programs/{pid}:end")):
        status, answer = http(auth_server, method, path, token=TOKEN_B)
        assert_error(status, answer, 404, "not_found_error", (pid, "not an active program"))
        assert answer == {"error": {**missing["error"], "message": missing["error"][
            "message"].replace("never-started", pid)}}
    for headers, body in (({"X-Program-Id": pid}, chat()), ({"X-Session-Id": pid}, chat()),
                          (None, chat(program_id=pid))):
        status, answer = http(auth_server, "POST", "/v1/chat/completions", body, TOKEN_B, headers)
        assert status == 200 and answer["program_id"] == pid, answer
    status, mine = http(auth_server, "GET", f"/v1/programs/{pid}", token=TOKEN_B)
    assert (mine["tenant"], mine["num_calls"]) == ("team-b", 3), mine
    status, info = http(auth_server, "GET", f"/v1/programs/{pid}", token=TOKEN_A)
    assert (info["tenant"], info["state"], info["num_calls"]) == ("team-a", "active", 1)
    assert_healthy(auth_server, baseline, TOKEN_A)
    for token in (TOKEN_A, TOKEN_B):
        status, info = http(auth_server, "POST", f"/v1/programs/{pid}:end", token=token)
        assert status == 200 and info["state"] == "completed", info
    assert_healthy(auth_server, baseline, TOKEN_A)


# ----- 404 ----------------------------------------------------------------------------

def test_404_unknown_program(auth_server, baseline):
    for method, path in (("GET", "/v1/programs/no-such-program"),
                         ("POST", "/v1/programs/no-such-program:end")):
        status, answer = http(auth_server, method, path, token=TOKEN_A)
        assert_error(status, answer, 404, "not_found_error", ("no-such-program",))
    assert_healthy(auth_server, baseline, TOKEN_A)


def test_404_ended_program_is_no_longer_readable(auth_server, baseline):
    pid = "prog-ended-404"
    status, answer = http(auth_server, "POST", "/v1/completions", completion(), TOKEN_A,
                          {"X-Program-Id": pid})
    assert status == 200, answer
    status, answer = http(auth_server, "POST", f"/v1/programs/{pid}:end", token=TOKEN_A)
    assert status == 200, answer
    status, answer = http(auth_server, "GET", f"/v1/programs/{pid}", token=TOKEN_A)
    assert_error(status, answer, 404, "not_found_error", (pid,))
    assert_healthy(auth_server, baseline, TOKEN_A)


@pytest.mark.parametrize("path, body", [("/v1/chat/completions", chat(model="gpt-4o")),
                                        ("/v1/completions", completion(model="gpt-4o"))],
                         ids=["chat", "completions"])
def test_404_unknown_model(auth_server, baseline, path, body):
    status, answer = http(auth_server, "POST", path, body, TOKEN_A)
    assert_error(status, answer, 404, "not_found_error", ("gpt-4o",), param="model",
                 code="model_not_found")
    # the served name is accepted
    status, models = http(auth_server, "GET", "/v1/models", token=TOKEN_A)
    assert status == 200, models
    status, answer = http(auth_server, "POST", path, {**body, "model": models["data"][0]["id"]},
                          TOKEN_A)
    assert status == 200, answer
    assert_healthy(auth_server, baseline, TOKEN_A)


# ----- 409 ----------------------------------------------------------------------------

def test_409_reusing_an_ended_programs_id(auth_server, baseline):
    """An ended program's id is not reused: naming it again is a conflict (whoever asks),
    not a fresh program."""
    pid = "prog-ended-409"
    status, answer = http(auth_server, "POST", "/v1/chat/completions", chat(), TOKEN_A,
                          {"X-Program-Id": pid})
    assert status == 200, answer
    status, answer = http(auth_server, "POST", f"/v1/programs/{pid}:end", token=TOKEN_A)
    assert status == 200, answer
    for token, path, body, headers in (
            (TOKEN_A, "/v1/chat/completions", chat(), {"X-Program-Id": pid}),
            (TOKEN_A, "/v1/completions", completion(stream=True), {"X-Session-Id": pid}),
            (TOKEN_A, "/v1/completions", completion(program_id=pid), None)):
        status, answer = http(auth_server, "POST", path, body, token, headers)
        assert_error(status, answer, 409, "conflict_error", (pid, "already in use"))
    # no program was started under that id
    status, answer = http(auth_server, "GET", f"/v1/programs/{pid}", token=TOKEN_A)
    assert_error(status, answer, 404, "not_found_error", (pid,))
    assert_healthy(auth_server, baseline, TOKEN_A)


# ----- 429 ----------------------------------------------------------------------------

def test_429_when_the_waiting_queue_is_full(tiny_llama_dir):
    """max_num_seqs=1, max_waiting=1: one long call runs, a second waits, the third is
    refused. The running call has far more tokens left than a request takes, and is
    checked to still run after the refusals, so the queue was full throughout."""
    server = start_server(server_config(tiny_llama_dir, max_num_seqs=1), port=None,
                          http_port=0, max_waiting=1)
    try:
        baseline = greedy(server)
        long_body = {**GREEDY, "max_tokens": LONG_TOKENS}
        running = SSE(server, "/v1/completions", long_body)
        running_id, received, rest = first_tokens(running)
        waiting = SSE(server, "/v1/completions", {**GREEDY, "max_tokens": 4})
        load = server.engine_loop.call(lambda e: e.stats().load)
        assert (load.calls_running, load.calls_waiting) == (1, 1)
        still_running, left = call_state(server, running_id)
        assert still_running and left > LONG_TOKENS // 2
        for path, body in (("/v1/completions", completion()),
                           ("/v1/completions", completion(stream=True)),
                           ("/v1/chat/completions", chat()),
                           ("/v1/chat/completions", chat(n=2))):
            status, answer = http(server, "POST", path, body)
            assert_error(status, answer, 429, "rate_limit_error", ("waiting queue", "full"))
        assert call_state(server, running_id)[0], "the long call finished too early"
        load = server.engine_loop.call(lambda e: e.stats().load)
        # the refused left nothing: no call, and no program (n=2 starts one of its own)
        assert (load.calls_running, load.calls_waiting, load.programs_active) == (1, 1, 2)
        # the running call is unharmed: greedy tokens to its end
        for chunk in rest:
            received += [t for c in chunk["choices"] for t in c.get("token_ids", [])]
        assert len(received) == LONG_TOKENS and received[:len(baseline)] == baseline
        running.close()
        waited = [t for chunk in waiting.chunks() for c in chunk["choices"]
                  for t in c.get("token_ids", [])]
        assert waited == baseline[:4]
        waiting.close()
        assert_healthy(server, baseline)
    finally:
        server.stop(grace=0)


# ----- 503 ----------------------------------------------------------------------------

def test_503_while_draining(tiny_llama_dir):
    """stop(grace) in the background with a long call in flight: new requests get 503
    while the call in flight runs to its end; then nothing is left in the engine."""
    server = start_server(server_config(tiny_llama_dir), port=None, http_port=0)
    stopper = threading.Thread(target=server.stop, kwargs=dict(grace=30.0))
    try:
        baseline = greedy(server)
        status, answer = http(server, "GET", "/health")
        assert (status, answer) == (200, {"status": "ok"})
        in_flight = SSE(server, "/v1/completions", {**GREEDY, "max_tokens": LONG_TOKENS})
        call_id, received, rest = first_tokens(in_flight)
        stopper.start()
        deadline = time.monotonic() + 10
        while not server.engine_loop.draining and time.monotonic() < deadline:
            time.sleep(0.001)
        assert server.engine_loop.draining
        for path, body in (("/v1/completions", completion()),
                           ("/v1/completions", completion(stream=True)),
                           ("/v1/chat/completions", chat()),
                           ("/v1/chat/completions", chat(n=2)),
                           ("/v1/chat/completions", chat(program_id="new-while-draining"))):
            status, answer = http(server, "POST", path, body)
            assert_error(status, answer, 503, "service_unavailable", ("shutting down",))
        status, answer = http(server, "GET", "/health")
        assert_error(status, answer, 503, "service_unavailable", ("shutting down",))
        assert call_state(server, call_id)[0], "the call in flight finished too early"
        finish = None
        for chunk in rest:
            for choice in chunk["choices"]:
                received += choice.get("token_ids", [])
                finish = choice["finish_reason"] or finish
        in_flight.close()
        assert finish == "length" and len(received) == LONG_TOKENS
        assert received[:len(baseline)] == baseline  # still the greedy tokens
        stopper.join(timeout=30)
        assert not stopper.is_alive()
        # the engine thread is gone: read the engine directly
        engine = server.engine_loop.engine
        assert not engine.has_unfinished_calls() and not engine.calls
        assert engine.stats().kv_blocks_used == 0
        engine.check_integrity()
    finally:
        if stopper.is_alive():
            stopper.join(timeout=30)
        server.stop(grace=0)
