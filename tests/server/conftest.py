"""Fixtures for the gRPC server tests: a shared server on loopback over the tiny model, a raw
stub, and a leak check (helpers live in grpc_helpers.py)."""

from __future__ import annotations

from typing import Iterator

import grpc
import pytest
from grpc_helpers import assert_clean, free_blocks, start

from server import agentix_pb2_grpc


@pytest.fixture(scope="module")
def grpc_server(tiny_llama_dir):
    """One plain server (no auth) shared by a test module."""
    server = start(tiny_llama_dir)
    yield server
    server.stop(grace=0)


@pytest.fixture(scope="module")
def stub(grpc_server) -> Iterator[agentix_pb2_grpc.AgentixStub]:
    with grpc.insecure_channel(grpc_server.address) as channel:
        yield agentix_pb2_grpc.AgentixStub(channel)


@pytest.fixture
def clean(grpc_server):
    """Asserts after the test that the shared server is back to its idle state."""
    free = free_blocks(grpc_server)
    yield
    assert_clean(grpc_server, free)
