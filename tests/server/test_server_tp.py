"""A server over a tensor-parallel engine (TP=2 on gloo): its tokens are the single-device
engine's, stopping the server stops the worker process, and a worker that dies breaks the
engine for good: health NOT_SERVING, every call UNAVAILABLE (HTTP 503) naming the rank,
fast."""

from __future__ import annotations

import os
import signal
import time

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_helpers import gen_request, rpc_error, start
from processes import wait_gone
from router_helpers import wait_until
from test_http_errors import http

from engine import LLM, SamplingParams
from server import agentix_pb2_grpc
from server.client import AgentixClient

PROMPT = [1, 17, 42, 99, 5]
MAX_TOKENS = 8


def test_serving_at_tensor_parallel_2(tiny_llama_dir):
    with LLM(tiny_llama_dir, block_size=8, num_kv_blocks=64) as llm:
        [expected] = llm.generate([PROMPT], SamplingParams(max_tokens=MAX_TOKENS,
                                                           ignore_eos=True))
    server = start(tiny_llama_dir, tensor_parallel_size=2)
    pids = server.engine_loop.call(lambda engine: engine.executor.worker_pids)
    try:
        with AgentixClient(server.address) as client:
            got = client.generate(PROMPT, max_tokens=MAX_TOKENS, ignore_eos=True)
        assert list(got.token_ids) == expected.token_ids
        assert len(pids) == 1 and wait_gone(pids, 0.0) == pids
    finally:
        server.stop(grace=0)
    assert wait_gone(pids, 0.0) == []   # stop waited for it


def test_a_dead_worker_makes_the_server_unavailable_for_good(tiny_llama_dir):
    """SIGKILL of rank 1 mid-stream: the stream ends UNAVAILABLE naming rank 1 within
    seconds, health turns NOT_SERVING, and every later call is refused at once with the
    same status, over HTTP too (no step is retried: the engine stays broken until it is
    replaced)."""
    server = start(tiny_llama_dir, tensor_parallel_size=2, http_port=0)
    [pid] = server.engine_loop.call(lambda engine: engine.executor.worker_pids)
    try:
        with grpc.insecure_channel(server.address) as channel:
            stub = agentix_pb2_grpc.AgentixStub(channel)
            health = health_pb2_grpc.HealthStub(channel)
            stream = stub.Generate(gen_request(PROMPT, max_tokens=500, ignore_eos=True),
                                   timeout=30)
            next(stream)
            os.kill(pid, signal.SIGKILL)
            started = time.monotonic()
            cut = rpc_error(list, stream)
            assert (cut.code(), time.monotonic() - started < 5) == (
                grpc.StatusCode.UNAVAILABLE, True)
            assert cut.details() == (f"tensor-parallel worker rank 1 (pid {pid}) exited "
                                     f"with status -9")
            wait_until(lambda: health.Check(health_pb2.HealthCheckRequest(service="")).status
                       == health_pb2.HealthCheckResponse.NOT_SERVING, timeout=2,
                       what="health NOT_SERVING")
            for _ in range(2):
                started = time.monotonic()
                refused = rpc_error(stub.Generate, gen_request(PROMPT, max_tokens=4),
                                    timeout=5)
                assert (refused.code(), refused.details()) == (cut.code(), cut.details())
                assert time.monotonic() - started < 1
        for method, path, body in (("GET", "/health", None),
                                   ("POST", "/v1/completions", {"prompt": "w1 w2",
                                                                "max_tokens": 4})):
            status, answer = http(server, method, path, body, timeout=5)
            assert (status, answer["error"]["message"]) == (503, cut.details())
    finally:
        server.stop(grace=0)
