"""The router's own /metrics (server/router/metrics.py) over two in-process replicas, on a
gRPC-only router with a metrics port and on its OpenAI door; and what a gRPC-only router's
watch does (it ran only with an HTTP door before): health follows the replicas, programs
expire after their TTL."""

from __future__ import annotations

import urllib.error
import urllib.request

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_helpers import collect, gen_request
from prometheus_client.parser import text_string_to_metric_families
from router_helpers import in_process_replicas, router_over, wait_until

from scheduler.config import SchedulerConfig
from scheduler.placement import make_placement
from server import agentix_pb2 as pb
from server import agentix_pb2_grpc


def scrape(address: str) -> dict[tuple[str, tuple], float]:
    """(sample name, sorted labels) -> value of the router's /metrics at `address`."""
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as response:
        assert response.headers["content-type"].startswith("text/plain")
        text = response.read().decode()
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def per_replica(metrics: dict, name: str, replicas) -> list[float]:
    return [metrics[(name, (("address", r.address), ("replica", str(i))))]
            for i, r in enumerate(replicas)]


def health_of(address: str, service: str = "") -> int:
    with grpc.insecure_channel(address) as channel:
        return health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=service), timeout=5).status


def test_a_grpc_only_router_counts_its_placements_and_follows_its_replicas(tiny_llama_dir):
    replicas = in_process_replicas(tiny_llama_dir)
    router = router_over(replicas, make_placement("round_robin"), metrics_port=0)
    try:
        assert router.http_address is None and router.metrics_address is not None
        before = scrape(router.metrics_address)
        assert per_replica(before, "agentix_router_replica_healthy", replicas) == [1, 1]
        assert per_replica(before, "agentix_router_replica_placements_total",
                           replicas) == [0, 0]
        with grpc.insecure_channel(router.address) as channel:
            stub = agentix_pb2_grpc.AgentixStub(channel)
            pid = stub.StartProgram(pb.StartProgramRequest(program_id="m")).program_id
            for i in range(3):
                collect(stub.Generate(gen_request([1, 5 + i, 6], pid, max_tokens=2)))
            during = scrape(router.metrics_address)
            stub.EndProgram(pb.EndProgramRequest(program_id=pid))
        assert per_replica(during, "agentix_router_replica_placements_total",
                           replicas) == [2, 1]
        assert per_replica(during, "agentix_router_replica_calls_in_flight",
                           replicas) == [0, 0]
        assert during[("agentix_router_programs_active", ())] == 1
        assert during[("agentix_router_calls_in_flight", ())] == 0
        assert during[("agentix_router_calls_retried_total", ())] == 0
        assert during[("agentix_router_calls_lost_mid_stream_total", ())] == 0
        assert scrape(router.metrics_address)[("agentix_router_programs_active", ())] == 0
        with urllib.request.urlopen(f"http://{router.metrics_address}/health",
                                    timeout=10) as response:
            assert response.status == 200
        # Health follows the replicas without an HTTP door: one gone, then both.
        replicas[1].stop(grace=0)
        wait_until(lambda: per_replica(scrape(router.metrics_address),
                                       "agentix_router_replica_healthy", replicas) == [1, 0],
                   what="replica 1 unhealthy in /metrics")
        assert health_of(router.address) == health_pb2.HealthCheckResponse.SERVING
        replicas[0].stop(grace=0)
        wait_until(lambda: health_of(router.address)
                   == health_pb2.HealthCheckResponse.NOT_SERVING,
                   what="the router NOT_SERVING with no replica")
        assert health_of(router.address, "liveness") == health_pb2.HealthCheckResponse.SERVING
        with pytest.raises(urllib.error.HTTPError) as error:
            urllib.request.urlopen(f"http://{router.metrics_address}/health", timeout=10)
        assert error.value.code == 503
    finally:
        router.stop(grace=0)
        for server in replicas:
            server.stop(grace=0)


def test_a_grpc_only_router_expires_programs_after_their_ttl(tiny_llama_dir):
    replicas = in_process_replicas(tiny_llama_dir, count=1)
    router = router_over(replicas, make_placement("round_robin"),
                         scheduler=SchedulerConfig(program_ttl=0.5))
    try:
        with grpc.insecure_channel(router.address) as channel:
            stub = agentix_pb2_grpc.AgentixStub(channel)
            pid = stub.StartProgram(pb.StartProgramRequest(program_id="idle")).program_id
            collect(stub.Generate(gen_request([1, 5, 6], pid, max_tokens=2)))
        assert router.call(lambda: pid in router.router.programs.table)
        wait_until(lambda: not router.call(lambda: pid in router.router.programs.table),
                   what="the idle program expired on the router")
        wait_until(lambda: replicas[0].engine_loop.call(
            lambda e: e.scheduler.table.is_recently_ended(pid)),
            what="the idle program ended on its replica")
    finally:
        router.stop(grace=0)
        replicas[0].stop(grace=0)


def test_the_openai_door_serves_the_router_metrics(tiny_llama_dir):
    replicas = in_process_replicas(tiny_llama_dir, count=1)
    router = router_over(replicas, make_placement("round_robin"), model=tiny_llama_dir,
                         http_port=0)
    try:
        assert router.metrics_address is None
        metrics = scrape(router.http_address)
        assert per_replica(metrics, "agentix_router_replica_healthy", replicas) == [1]
        assert metrics[("agentix_router_programs_active", ())] == 0
    finally:
        router.stop(grace=0)
        replicas[0].stop(grace=0)
