"""Prometheus /metrics and the EngineStats RPC against the engine's own counts: a small
workload over HTTP and gRPC (one-call requests, a streamed chat, an aborted stream, a
two-call program sharing a prefix with prefix caching on), then the counters, histogram
counts and gauges must equal what the clients were told and what the engine holds."""

from __future__ import annotations

import json
import math
import threading
import time
import urllib.request
from typing import Any

import pytest
from grpc_helpers import server_config, wait_idle
from prometheus_client.parser import text_string_to_metric_families

from server.app import start_server
from server.client import AgentixClient, Completion, Delta

GAUGES = ("agentix_calls_running", "agentix_calls_waiting", "agentix_calls_swapped",
          "agentix_programs_active", "agentix_kv_blocks_free", "agentix_kv_blocks_cached",
          "agentix_kv_blocks_used", "agentix_host_blocks_used")
COUNTERS = {  # sample name -> (label name, its values) or None
    "agentix_preemptions_total": ("mode", {"recompute", "swap", "keep"}),
    "agentix_swap_bytes_total": ("direction", {"in", "out"}),
    "agentix_prompt_tokens_total": ("source", {"computed", "cached"}),
    "agentix_generation_tokens_total": None,
    "agentix_promotions_total": None,
}
CALL_HISTOGRAMS = ("agentix_time_to_first_token_seconds",
                   "agentix_time_per_output_token_seconds", "agentix_call_queue_seconds",
                   "agentix_call_service_seconds")
PROGRAM_HISTOGRAMS = ("agentix_program_external_seconds",
                      "agentix_program_normalized_latency_seconds_per_token")
ALLOWED_LABELS = {"mode", "direction", "source", "level", "le", "tenant"}
TOKENS = {"tok-a": "team-a", "tok-b": "team-b"}
SHARED_PREFIX = list(range(100, 120))  # 20 tokens: two full blocks of 8
ABORT_PROMPT = list(range(300, 310))   # used by no other call: no cache hit
LONG_TOKENS = 200


# ----- helpers ------------------------------------------------------------------------

def http_json(address: str, method: str, path: str, body: Any = None,
              headers: dict[str, str] | None = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"http://{address}{path}", data=data, method=method)
    request.add_header("Content-Type", "application/json")
    for key, value in (headers or {}).items():
        request.add_header(key, value)
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 200
        return json.loads(response.read())


def open_stream(address: str, body: dict[str, Any], headers: dict[str, str] | None = None):
    path = "/v1/chat/completions" if "messages" in body else "/v1/completions"
    request = urllib.request.Request(f"http://{address}{path}",
                                     data=json.dumps({**body, "stream": True}).encode(),
                                     method="POST")
    request.add_header("Content-Type", "application/json")
    for key, value in (headers or {}).items():
        request.add_header(key, value)
    response = urllib.request.urlopen(request, timeout=60)
    assert response.status == 200
    return response


def sse_chunks(response):
    for line in response:
        line = line.decode().strip()
        if line == "data: [DONE]":
            return
        if line.startswith("data: "):
            yield json.loads(line[len("data: "):])


class Scrape:
    """One parsed /metrics page: samples by (name, labels), and every family."""

    def __init__(self, address: str) -> None:
        with urllib.request.urlopen(f"http://{address}/metrics", timeout=30) as response:
            assert response.status == 200
            assert response.headers["Content-Type"].startswith("text/plain")
            self.text = response.read().decode()
        self.families = list(text_string_to_metric_families(self.text))
        self.types = {f.name: f.type for f in self.families}
        self.samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
                        for f in self.families for s in f.samples}

    def value(self, name: str, **labels: str) -> float:
        return self.samples[(name, tuple(sorted(labels.items())))]

    def labelled(self, name: str) -> dict[tuple, float]:
        return {labels: v for (n, labels), v in self.samples.items() if n == name}

    def label_names(self) -> set[str]:
        return {k for f in self.families for s in f.samples for k in s.labels}


def rpc_figures(rpc: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in rpc.items() if k not in ("top_programs", "steps")}


def engine_figures(stats) -> dict[str, Any]:
    """EngineStats as the EngineStats RPC's fields (steps and top programs aside)."""
    load, counters = stats.load, stats.counters
    return {
        "calls_running": load.calls_running, "calls_waiting": load.calls_waiting,
        "calls_swapped": load.calls_swapped, "programs_active": load.programs_active,
        "kv_blocks_total": stats.kv_blocks_total, "kv_blocks_free": stats.kv_blocks_free,
        "kv_blocks_cached": stats.kv_blocks_cached, "kv_blocks_used": stats.kv_blocks_used,
        "host_blocks_total": stats.host_blocks_total,
        "host_blocks_used": stats.host_blocks_used, "queue_depths": list(load.queue_depths),
        "running_tokens": load.running_tokens, "waiting_tokens": load.waiting_tokens,
        "preemptions_recompute": stats.preemptions["recompute"],
        "preemptions_swap": stats.preemptions["swap"],
        "preemptions_keep": stats.preemptions["keep"],
        "swap_out_bytes": counters.swap_out_bytes, "swap_in_bytes": counters.swap_in_bytes,
        "prompt_tokens_computed": counters.prompt_tokens_computed,
        "prompt_tokens_cached": counters.prompt_tokens_cached,
        "generation_tokens": counters.generation_tokens, "promotions": stats.promotions}


def assert_scrape_is_engine(scrape: Scrape, stats) -> None:
    """Every gauge and counter of an idle scrape is the engine's own figure."""
    load, counters = stats.load, stats.counters
    assert scrape.value("agentix_calls_running") == load.calls_running
    assert scrape.value("agentix_calls_waiting") == load.calls_waiting
    assert scrape.value("agentix_calls_swapped") == load.calls_swapped
    assert scrape.value("agentix_programs_active") == load.programs_active
    assert scrape.value("agentix_kv_blocks_free") == stats.kv_blocks_free
    assert scrape.value("agentix_kv_blocks_cached") == stats.kv_blocks_cached
    assert scrape.value("agentix_kv_blocks_used") == stats.kv_blocks_used
    assert scrape.value("agentix_host_blocks_used") == stats.host_blocks_used
    for mode, n in stats.preemptions.items():
        assert scrape.value("agentix_preemptions_total", mode=mode) == n
    assert scrape.value("agentix_swap_bytes_total", direction="out") == counters.swap_out_bytes
    assert scrape.value("agentix_swap_bytes_total", direction="in") == counters.swap_in_bytes
    assert scrape.value("agentix_prompt_tokens_total", source="computed") \
        == counters.prompt_tokens_computed
    assert scrape.value("agentix_prompt_tokens_total", source="cached") \
        == counters.prompt_tokens_cached
    assert scrape.value("agentix_generation_tokens_total") == counters.generation_tokens
    assert scrape.value("agentix_promotions_total") == stats.promotions
    for level, n in enumerate(load.queue_depths):
        assert scrape.value("agentix_queue_depth", level=str(level)) == n


# ----- the shared server and workload -------------------------------------------------

@pytest.fixture(scope="module")
def server(tiny_llama_dir):
    """gRPC and HTTP, prefix caching on (block size 8)."""
    running = start_server(server_config(tiny_llama_dir, enable_prefix_caching=True),
                           port=0, http_port=0)
    yield running
    running.stop(grace=0)


@pytest.fixture(scope="module")
def workload(server) -> dict[str, Any]:
    """Run the workload between two scrapes; returns what the clients were told."""
    wait_idle(server)
    before = Scrape(server.http_address)
    usages: list[tuple[int, int, int]] = []  # (prompt, cached, completion) per call
    ids: set[str] = set()                    # program and call ids the workload used
    address = server.http_address

    def http_usage(answer: dict[str, Any], max_tokens: int) -> None:
        u = answer["usage"]
        assert u["completion_tokens"] == max_tokens
        usages.append((u["prompt_tokens"], u["prompt_tokens_details"]["cached_tokens"],
                       u["completion_tokens"]))
        ids.add(answer["id"].split("-", 1)[1])

    # HTTP: a completion, a chat, a streamed chat with usage (one-call programs each)
    http_usage(http_json(address, "POST", "/v1/completions", {
        "prompt": "w10 w11 w12", "max_tokens": 5, "temperature": 0, "ignore_eos": True}), 5)
    http_usage(http_json(address, "POST", "/v1/chat/completions", {
        "messages": [{"role": "user", "content": "w13 w14"}], "max_tokens": 6,
        "temperature": 0, "ignore_eos": True}), 6)
    response = open_stream(address, {
        "messages": [{"role": "user", "content": "w15 w16 w17"}], "max_tokens": 7,
        "temperature": 0, "ignore_eos": True, "return_token_ids": True,
        "stream_options": {"include_usage": True}})
    chunks = list(sse_chunks(response))
    response.close()
    streamed = [t for c in chunks for choice in c["choices"] for t in choice["token_ids"]]
    assert len(streamed) == 7 and chunks[-1]["choices"] == []
    http_usage(chunks[-1], 7)

    # HTTP: a stream aborted by its client, in a named program (to learn what it generated)
    abort_pid = "metrics-aborted-program"
    ids.add(abort_pid)
    response = open_stream(address, {"prompt": ABORT_PROMPT, "max_tokens": LONG_TOKENS,
                                     "temperature": 0, "ignore_eos": True,
                                     "return_token_ids": True},
                           {"X-Program-Id": abort_pid})
    received = 0
    for chunk in sse_chunks(response):
        ids.add(chunk["id"].split("-", 1)[1])
        received += sum(len(choice["token_ids"]) for choice in chunk["choices"])
        if received >= 2:
            break
    response.close()
    deadline = time.monotonic() + 10
    while (info := http_json(address, "GET", f"/v1/programs/{abort_pid}"))["active_calls"] \
            and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not info["active_calls"] and info["num_calls"] == 1
    assert 2 <= info["generated_tokens"] < LONG_TOKENS, "the stream was not aborted"
    assert info["prompt_tokens"] == len(ABORT_PROMPT)
    aborted = (info["prompt_tokens"], 0, info["generated_tokens"])
    assert http_json(address, "POST", f"/v1/programs/{abort_pid}:end")["state"] == "completed"

    # gRPC: two one-call requests, then a program of two calls sharing a 20-token prefix
    def grpc_usage(completion: Completion, max_tokens: int) -> None:
        u = completion.usage
        assert u.completion_tokens == len(completion.token_ids) == max_tokens
        usages.append((u.prompt_tokens, u.cached_tokens, u.completion_tokens))
        ids.add(completion.call_id)

    with AgentixClient(server.address) as client:
        grpc_usage(client.generate("w20 w21 w22", max_tokens=4, ignore_eos=True), 4)
        grpc_usage(client.generate([1, 5, 6], max_tokens=7, ignore_eos=True), 7)
        with client.program() as program:
            ids.add(program.program_id)
            first = program.generate(SHARED_PREFIX + [40], max_tokens=5, ignore_eos=True)
            second = program.generate(SHARED_PREFIX + [41], max_tokens=5, ignore_eos=True)
        grpc_usage(first, 5)
        grpc_usage(second, 5)
        assert first.usage.cached_tokens == 0 and second.usage.cached_tokens == 16

    wait_idle(server)
    after = Scrape(server.http_address)
    return dict(before=before, after=after, usages=usages, aborted=aborted, ids=ids,
                calls=len(usages) + 1,       # the aborted call too
                programs=3 + 1 + 2 + 1)     # HTTP one-call, aborted, gRPC one-call, program


def delta(workload: dict[str, Any], name: str, **labels: str) -> float:
    return workload["after"].value(name, **labels) - workload["before"].value(name, **labels)


# ----- /metrics -----------------------------------------------------------------------

def test_every_metric_exists_with_its_type(workload):
    scrape = workload["after"]
    for name in GAUGES:
        assert scrape.types.get(name) == "gauge", name
        assert scrape.labelled(name) == {(): scrape.value(name)}, name
    for name, labelled in COUNTERS.items():
        family = name.removesuffix("_total")
        assert scrape.types.get(family) == "counter", name
        series = scrape.labelled(name)
        if labelled is None:
            assert list(series) == [()], name
        else:
            label, values = labelled
            assert {labels for labels in series} == {((label, v),) for v in values}, name
    for name in CALL_HISTOGRAMS + PROGRAM_HISTOGRAMS:
        assert scrape.types.get(name) == "histogram", name
        for suffix in ("_count", "_sum"):
            assert (f"{name}{suffix}", ()) in scrape.samples, name + suffix
        buckets = scrape.labelled(f"{name}_bucket")
        assert (("le", "+Inf"),) in buckets
        assert buckets[(("le", "+Inf"),)] == scrape.value(f"{name}_count")


def test_counters_equal_what_the_clients_were_told(server, workload):
    usages, aborted = workload["usages"], workload["aborted"]
    prompt = sum(u[0] for u in usages) + aborted[0]
    cached = sum(u[1] for u in usages) + aborted[1]
    generated = sum(u[2] for u in usages) + aborted[2]
    assert cached > 0  # the program's second call hit the shared prefix
    assert delta(workload, "agentix_generation_tokens_total") == generated
    assert delta(workload, "agentix_prompt_tokens_total", source="cached") == cached
    assert delta(workload, "agentix_prompt_tokens_total", source="computed") \
        + delta(workload, "agentix_prompt_tokens_total", source="cached") == prompt
    for mode in ("recompute", "swap", "keep"):  # the pool never ran short
        assert delta(workload, "agentix_preemptions_total", mode=mode) == 0
    # idle now: the scrape is the engine's figures exactly
    wait_idle(server)
    scrape = Scrape(server.http_address)
    assert_scrape_is_engine(scrape, server.engine_loop.call(lambda e: e.stats()))
    assert scrape.value("agentix_kv_blocks_used") == 0
    assert scrape.value("agentix_calls_running") == scrape.value("agentix_calls_waiting") == 0


def test_histogram_counts_equal_finished_calls_and_ended_programs(workload):
    for name in CALL_HISTOGRAMS:  # every call made a first token and more than one token
        assert delta(workload, f"{name}_count") == workload["calls"], name
    for name in PROGRAM_HISTOGRAMS:
        assert delta(workload, f"{name}_count") == workload["programs"], name
    # the sums moved with the counts, and stay non-negative
    for name in CALL_HISTOGRAMS + PROGRAM_HISTOGRAMS:
        assert delta(workload, f"{name}_sum") >= 0 and workload["after"].value(
            f"{name}_sum") >= 0, name


def test_no_label_carries_a_program_or_call_id(workload):
    for scrape in (workload["before"], workload["after"]):
        assert scrape.label_names() <= ALLOWED_LABELS
        assert "tenant" not in scrape.label_names()  # metrics_tenant_label is off
        values = {v for f in scrape.families for s in f.samples for v in s.labels.values()}
        assert not values & workload["ids"]
        for some_id in workload["ids"]:
            assert some_id not in scrape.text, some_id


# ----- the EngineStats RPC ------------------------------------------------------------

def test_engine_stats_rpc_is_the_engines_own_snapshot(server, workload):
    wait_idle(server)
    with AgentixClient(server.address) as client:
        with client.program() as program:  # one live program, listed on top
            program.generate([1, 7, 8], max_tokens=3, ignore_eos=True)
            wait_idle(server)
            before = server.engine_loop.call(lambda e: e.stats())
            rpc = client.engine_stats(top_programs=5)
            after = server.engine_loop.call(lambda e: e.stats())
            assert [p["program_id"] for p in rpc["top_programs"]] == [program.program_id]
            top = rpc["top_programs"][0]
            assert (top["num_calls"], top["prompt_tokens"], top["generated_tokens"]) == (1, 3, 3)
    assert rpc_figures(rpc) == engine_figures(before) == engine_figures(after)
    assert before.steps <= rpc["steps"] <= after.steps  # idle ticks may step in between
    assert rpc["kv_blocks_free"] + rpc["kv_blocks_cached"] + rpc["kv_blocks_used"] \
        == rpc["kv_blocks_total"]
    assert rpc["kv_blocks_used"] == 0 and rpc["calls_running"] == rpc["calls_waiting"] == 0
    assert rpc["programs_active"] == 1
    # and /metrics says the same
    scrape = Scrape(server.http_address)
    assert scrape.value("agentix_generation_tokens_total") == rpc["generation_tokens"]
    assert scrape.value("agentix_prompt_tokens_total", source="cached") \
        == rpc["prompt_tokens_cached"]


def test_blocks_used_mid_stream_are_the_running_calls_blocks(server, workload):
    """While a long stream runs, used > 0 and the pools add up; with the engine thread
    held between two steps, used is exactly the call's table, which covers its tokens with
    KV (counted from the stream: the last sampled token has no KV yet) and at most the
    `multistep - 1` tokens a multistep round reserved ahead of them."""
    wait_idle(server)
    engine = server.engine_loop.engine
    block_size = engine.config.block_size
    ahead = engine.config.scheduler.multistep - 1
    prompt = [1, 9, 10]
    with AgentixClient(server.address) as client:
        stream = client.stream(prompt, max_tokens=LONG_TOKENS, ignore_eos=True)
        first = next(stream)
        assert isinstance(first, Delta)
        call_id, received = first.call_id, len(first.token_ids)
        rpc = client.engine_stats()
        assert rpc["calls_running"] == 1 and rpc["kv_blocks_used"] > 0
        assert rpc["kv_blocks_free"] + rpc["kv_blocks_cached"] + rpc["kv_blocks_used"] \
            == rpc["kv_blocks_total"]
        for _ in range(3):  # hold the engine at three points of the stream
            held, release, seen = threading.Event(), threading.Event(), {}

            def hold() -> None:  # runs on the engine thread, between two steps
                engine.check_integrity()
                seen.update(stats=engine.stats(), table=len(engine.kv.block_table(call_id)),
                            out=engine.calls[call_id].num_output_tokens)
                held.set()
                release.wait(10)

            server.engine_loop.post(hold)
            assert held.wait(10)
            try:
                while received < seen["out"]:  # everything sampled so far reaches the client
                    item = next(stream)
                    assert isinstance(item, Delta)
                    received += len(item.token_ids)
                assert received == seen["out"]
                stats = seen["stats"]
                with_kv = len(prompt) + received - 1
                assert stats.kv_blocks_used == seen["table"], (received, stats)
                assert math.ceil(with_kv / block_size) <= seen["table"] \
                    <= math.ceil((with_kv + ahead) / block_size), (received, stats)
                assert stats.kv_blocks_free + stats.kv_blocks_cached + stats.kv_blocks_used \
                    == stats.kv_blocks_total
                assert stats.load.calls_running == 1
            finally:
                release.set()
            for _ in range(5 + 3 * received // 4):  # move on a few blocks' worth
                item = next(stream)
                assert isinstance(item, Delta)
                received += len(item.token_ids)
        rest = list(stream)
        received += sum(len(item.token_ids) for item in rest if isinstance(item, Delta))
        assert isinstance(rest[-1], Completion) and received == LONG_TOKENS
        wait_idle(server)
        rpc = client.engine_stats()
        assert rpc["kv_blocks_used"] == 0 and rpc["calls_running"] == 0


# ----- a gRPC-only server: /metrics on its own port, tenant labels --------------------

@pytest.fixture(scope="module")
def tenant_server(tiny_llama_dir):
    running = start_server(server_config(tiny_llama_dir), port=0, metrics_port=0,
                           auth_tokens=TOKENS, metrics_tenant_label=True)
    yield running
    running.stop(grace=0)


def test_grpc_only_server_serves_metrics_on_its_port(tenant_server):
    assert tenant_server.http_address is None and tenant_server.metrics_address
    with urllib.request.urlopen(f"http://{tenant_server.metrics_address}/health",
                                timeout=10) as response:
        assert response.status == 200
    before = Scrape(tenant_server.metrics_address)  # no token needed
    with AgentixClient(tenant_server.address, token="tok-a") as client:
        done = client.generate([1, 5, 6], max_tokens=6, ignore_eos=True)
    wait_idle(tenant_server)
    after = Scrape(tenant_server.metrics_address)
    for name in GAUGES:
        assert after.types.get(name) == "gauge", name
    for name in CALL_HISTOGRAMS + PROGRAM_HISTOGRAMS:
        assert after.types.get(name) == "histogram", name
    assert after.value("agentix_generation_tokens_total") \
        - before.value("agentix_generation_tokens_total") == done.usage.completion_tokens == 6
    assert_scrape_is_engine(after, tenant_server.engine_loop.call(lambda e: e.stats()))


def test_program_histograms_carry_the_tenant_label(tenant_server):
    def counts(scrape: Scrape, name: str) -> dict[str, float]:
        return {dict(labels)["tenant"]: v for labels, v in scrape.labelled(f"{name}_count").items()}

    before = Scrape(tenant_server.metrics_address)
    with AgentixClient(tenant_server.address, token="tok-a") as a, \
            AgentixClient(tenant_server.address, token="tok-b") as b:
        a.generate([1, 5, 6], max_tokens=3, ignore_eos=True)  # a one-call program of team-a
        with b.program() as program:                            # and a program of team-b
            program.generate([1, 5, 7], max_tokens=3, ignore_eos=True)
            program.generate([1, 5, 8], max_tokens=3, ignore_eos=True)
            pid = program.program_id
    wait_idle(tenant_server)
    after = Scrape(tenant_server.metrics_address)
    for name in PROGRAM_HISTOGRAMS:
        grown = {tenant: n - counts(before, name).get(tenant, 0)
                 for tenant, n in counts(after, name).items()}
        assert grown == {"team-a": 1, "team-b": 1}, name
        for labels in after.labelled(f"{name}_bucket"):
            assert {k for k, _ in labels} == {"le", "tenant"}, name
    for name in CALL_HISTOGRAMS:  # per-call histograms stay unlabelled
        assert list(after.labelled(f"{name}_count")) == [()], name
    assert after.label_names() <= ALLOWED_LABELS
    assert {dict(labels)["tenant"] for name in PROGRAM_HISTOGRAMS
            for labels in after.labelled(f"{name}_count")} <= set(TOKENS.values())
    assert pid not in after.text
