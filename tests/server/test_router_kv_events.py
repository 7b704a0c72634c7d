"""KV events over gRPC and in the router: `CacheEvents` answers only the trusted router,
with the chained hashes of the blocks a call cached; the router reads them with each poll,
and prefix-aware placement follows what a replica holds, not only what the router sent it."""

from __future__ import annotations

import grpc
import pytest
from grpc_helpers import collect, gen_request, start, wait_idle
from router_helpers import TOKEN, router_over, wait_until

from kvcache.cache_events import wire_hash
from kvcache.prefix_hash import hash_block
from scheduler.placement import make_placement
from server import agentix_pb2 as pb
from server import agentix_pb2_grpc
from server.auth import ROUTER_TOKEN_HEADER

BLOCK = 8
PROMPT = list(range(40, 64))  # three full blocks


def chain(tokens: list[int]) -> list[int]:
    hashes, parent = [], None
    for start in range(0, len(tokens) - BLOCK + 1, BLOCK):
        parent = hash_block(parent, tokens[start:start + BLOCK])
        hashes.append(wire_hash(parent))
    return hashes


@pytest.fixture(scope="module")
def cached_replicas(tiny_llama_dir):
    servers = [start(tiny_llama_dir, router_token=TOKEN, enable_prefix_caching=True)
               for _ in range(2)]
    yield servers
    for server in servers:
        server.stop(grace=0)


def test_only_the_trusted_router_reads_the_events(cached_replicas):
    server = cached_replicas[0]
    with grpc.insecure_channel(server.address) as channel:
        stub = agentix_pb2_grpc.AgentixStub(channel)
        for metadata in ((), ((ROUTER_TOKEN_HEADER, "guess"),)):
            with pytest.raises(grpc.RpcError) as info:
                stub.CacheEvents(pb.CacheEventsRequest(), metadata=metadata)
            assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
        trusted = ((ROUTER_TOKEN_HEADER, TOKEN),)
        first = stub.CacheEvents(pb.CacheEventsRequest(), metadata=trusted)
        assert first.reset
        collect(stub.Generate(gen_request(PROMPT, max_tokens=4, ignore_eos=True)))
        wait_idle(server)
        after = stub.CacheEvents(pb.CacheEventsRequest(epoch=first.epoch, since=first.next),
                                 metadata=trusted)
        assert (after.reset, list(after.stored), list(after.removed)) == (
            False, chain(PROMPT), [])
        # 24 prompt + 4 generated tokens, 27 computed: still three full blocks


def test_placement_follows_the_cache_the_replica_reports(cached_replicas, tiny_llama_dir):
    prompt = list(range(70, 94))  # three full blocks no other test sends
    router = router_over(cached_replicas, make_placement("round_robin"), model=tiny_llama_dir)
    try:
        with grpc.insecure_channel(router.address) as channel:
            stub = agentix_pb2_grpc.AgentixStub(channel)
            collect(stub.Generate(gen_request([7] * 9, max_tokens=2)))  # replica 0
            collect(stub.Generate(gen_request(prompt, max_tokens=2)))   # replica 1
            wait_until(lambda: router.call(lambda: set(chain(prompt)) <= (
                router.router.replicas[1].cache.hashes or set())), what="replica 1's events")
            assert router.call(lambda: router.router.replicas[0].cache.hashes.isdisjoint(
                chain(prompt)))
            fresh = make_placement("prefix_aware")  # has sent nothing anywhere: without
            # the events it would pick replica 0 (a tie, the lower index)

            def swap():
                router.router.placement = fresh
            router.call(swap)
            _, _, final = collect(stub.Generate(gen_request(prompt + [5, 6, 7], max_tokens=2)))
        assert final.usage.cached_tokens == 3 * BLOCK  # it went to replica 1, which holds it
    finally:
        router.stop(grace=0)
        for server in cached_replicas:
            wait_idle(server)
