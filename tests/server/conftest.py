"""Fixtures for the gRPC server tests: a shared server on loopback over the tiny model, a raw
stub, and a leak check (helpers live in grpc_helpers.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterator

import grpc
import pytest
from grpc_helpers import assert_clean, free_blocks, start
from reasoning_model import build_reasoning_model
from router_helpers import in_process_replicas
from tool_call_model import build_tool_call_model

from server import agentix_pb2_grpc


@pytest.fixture(scope="session")
def tool_call_model_dir(tmp_path_factory) -> str:
    """The model that answers every chat with one hermes-style tool call
    (tests/tool_call_model.py), built once."""
    return built(tmp_path_factory, "tool-call-model", build_tool_call_model)


@pytest.fixture(scope="session")
def reasoning_model_dir(tmp_path_factory) -> str:
    """The model that thinks, then makes one hermes-style tool call
    (tests/reasoning_model.py), built once."""
    return built(tmp_path_factory, "reasoning-model", build_reasoning_model)


def built(tmp_path_factory, name: str, build: Callable[[Path], None]) -> str:
    """The directory `build` writes a model to, a fresh one named after `name`."""
    path = tmp_path_factory.mktemp(name)
    build(path)
    return str(path)


@pytest.fixture(scope="module")
def grpc_server(tiny_llama_dir):
    """One plain server (no auth, no first-token deadline of its own: a call's is the only
    one) shared by a test module."""
    server = start(tiny_llama_dir, ttft_slo_tokens=None)
    yield server
    server.stop(grace=0)


@pytest.fixture(scope="module")
def stub(grpc_server) -> Iterator[agentix_pb2_grpc.AgentixStub]:
    with grpc.insecure_channel(grpc_server.address) as channel:
        yield agentix_pb2_grpc.AgentixStub(channel)


@pytest.fixture(scope="module")
def replicas(tiny_llama_dir):
    """Two in-process replicas trusting the router token (router_helpers.TOKEN), shared by
    a router test module."""
    servers = in_process_replicas(tiny_llama_dir)
    yield servers
    for server in servers:
        server.stop(grace=0)


@pytest.fixture
def clean(grpc_server):
    """Asserts after the test that the shared server is back to its idle state."""
    free = free_blocks(grpc_server)
    yield
    assert_clean(grpc_server, free)
