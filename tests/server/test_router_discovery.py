"""Replica discovery by DNS: the replica set follows a scripted resolver, slot by slot (exact
indices), and real replicas joining and leaving under load lose no program."""

from __future__ import annotations

import asyncio
import threading

import grpc
import pytest
from grpc_helpers import collect, gen_request
from router_helpers import TOKEN, in_process_replicas, wait_until

from scheduler.placement import make_placement
from scheduler.placement.base import ReplicaLoad
from scheduler.config import SchedulerConfig
from server import agentix_pb2 as pb
from server import agentix_pb2_grpc
from server.cli import build_parser
from server.cli_checks import UsageError, router_setup
from server.router import start_router
from server.router.core import MAX_REPLICAS, Router
from server.router.discovery import Discovery
from server.router.programs import RouterPrograms


class ScriptedDns:
    """A resolver whose answers the test sets: `answers[host]` (missing: OSError)."""

    def __init__(self, **answers: list[str]) -> None:
        self.answers = dict(answers)
        self.lock = threading.Lock()

    async def __call__(self, host: str, port: int) -> list[str]:
        with self.lock:
            if host not in self.answers:
                raise OSError(f"{host}: no such name")
            return list(self.answers[host])


def run(coro):
    return asyncio.new_event_loop().run_until_complete(coro)


async def router_with(dns: ScriptedDns, *names: str) -> tuple[Router, Discovery]:
    router = Router((), make_placement("round_robin"), RouterPrograms(SchedulerConfig()),
                    discovered=True)
    return router, Discovery(router, names or ("engines:7000",), dns, refresh_seconds=60)


def slots(router: Router) -> list[tuple[str, bool, bool]]:
    return [(r.address, r.retired, r.closed) for r in router.replicas]


def test_the_replica_set_follows_the_names_slot_by_slot():
    async def scenario():
        dns = ScriptedDns(engines=["10.0.0.1:7000", "10.0.0.2:7000"])
        router, discovery = await router_with(dns)
        assert await discovery.refresh() == ["10.0.0.1:7000", "10.0.0.2:7000"]
        assert slots(router) == [("10.0.0.1:7000", False, False),
                                 ("10.0.0.2:7000", False, False)]
        # .1 leaves with a call in flight on it: it retires but stays open; .3 takes a new
        # slot. A retired replica is never healthy, so placement skips it.
        router.replicas[0].attempts.add(object())
        router.replicas[0].healthy = True
        dns.answers["engines"] = ["10.0.0.2:7000", "10.0.0.3:7000"]
        await discovery.refresh()
        assert slots(router) == [("10.0.0.1:7000", True, False),
                                 ("10.0.0.2:7000", False, False),
                                 ("10.0.0.3:7000", False, False)]
        assert router.replicas[0].load() == ReplicaLoad(0, healthy=False)
        # Its call ends: the next refresh closes it, and the next new address takes slot 0.
        router.replicas[0].attempts.clear()
        await discovery.refresh()
        assert slots(router)[0] == ("10.0.0.1:7000", True, True)
        dns.answers["engines"] = ["10.0.0.2:7000", "10.0.0.3:7000", "10.0.0.4:7000"]
        await discovery.refresh()
        assert [r.address for r in router.replicas] == [
            "10.0.0.4:7000", "10.0.0.2:7000", "10.0.0.3:7000"]
        assert [r.index for r in router.replicas] == [0, 1, 2]
        await router.close()

    run(scenario())


def test_a_retired_replica_that_comes_back_rejoins_its_slot():
    async def scenario():
        dns = ScriptedDns(engines=["10.0.0.1:7000", "10.0.0.2:7000"])
        router, discovery = await router_with(dns)
        await discovery.refresh()
        first = router.replicas[0]
        first.attempts.add(object())  # still draining: not closed
        dns.answers["engines"] = ["10.0.0.2:7000"]
        await discovery.refresh()
        assert first.retired
        dns.answers["engines"] = ["10.0.0.2:7000", "10.0.0.1:7000"]
        await discovery.refresh()
        assert router.replicas[0] is first and not first.retired and not first.closed
        await router.close()

    run(scenario())


def test_a_name_that_stops_resolving_keeps_its_addresses_and_names_are_merged():
    async def scenario():
        dns = ScriptedDns(a=["10.0.0.1:7000"], b=["10.0.0.2:7000", "10.0.0.1:7000"])
        router, discovery = await router_with(dns, "a:7000", "b:7000")
        assert await discovery.refresh() == ["10.0.0.1:7000", "10.0.0.2:7000", "10.0.0.1:7000"]
        assert [r.address for r in router.replicas] == ["10.0.0.1:7000", "10.0.0.2:7000"]
        del dns.answers["b"]  # a DNS hiccup: b's last answer stands
        await discovery.refresh()
        assert slots(router) == [("10.0.0.1:7000", False, False),
                                 ("10.0.0.2:7000", False, False)]
        await router.close()

    run(scenario())


def test_static_replicas_stay_in_the_set_whatever_the_names_resolve_to():
    """`--replica A --replicas-dns NAME`: A keeps slot 0 through every refresh, beside the
    addresses NAME resolves to: also when NAME listed A and then drops it."""
    async def scenario():
        dns = ScriptedDns(engines=["10.0.0.1:7000"])
        router = Router(("10.0.0.9:7000",), make_placement("round_robin"),
                        RouterPrograms(SchedulerConfig()), discovered=True)
        discovery = Discovery(router, ("engines:7000",), dns, refresh_seconds=60)
        assert await discovery.refresh() == ["10.0.0.1:7000"]
        assert slots(router) == [("10.0.0.9:7000", False, False),
                                 ("10.0.0.1:7000", False, False)]
        dns.answers["engines"] = ["10.0.0.9:7000", "10.0.0.2:7000"]
        await discovery.refresh()
        assert slots(router) == [("10.0.0.9:7000", False, False),
                                 ("10.0.0.2:7000", False, False)]
        dns.answers["engines"] = []
        await discovery.refresh()
        assert slots(router) == [("10.0.0.9:7000", False, False),
                                 ("10.0.0.2:7000", True, True)]
        await router.close()

    run(scenario())


def test_the_replica_set_is_bounded():
    async def scenario():
        dns = ScriptedDns(engines=[f"10.0.{i // 250}.{i % 250}:7000"
                                   for i in range(MAX_REPLICAS + 5)])
        router, discovery = await router_with(dns)
        await discovery.refresh()
        assert len(router.replicas) == MAX_REPLICAS
        await router.close()

    run(scenario())


def test_the_router_command_needs_replicas_and_checks_dns_names():
    parser = build_parser()
    with pytest.raises(UsageError, match="--replica HOST:PORT or --replicas-dns"):
        router_setup(parser.parse_args(["router"]))
    with pytest.raises(UsageError, match="replicas-dns: expected NAME:PORT"):
        router_setup(parser.parse_args(["router", "--replicas-dns", "engines"]))
    options = router_setup(parser.parse_args(
        ["router", "--replicas-dns", "engines.ns.svc:50051", "--dns-refresh", "2"]))
    assert (options.replicas, options.replicas_dns, options.dns_refresh_seconds) == (
        (), ("engines.ns.svc:50051",), 2.0)


@pytest.mark.slow
def test_replicas_join_and_leave_under_load_and_no_program_is_lost(tiny_llama_dir):
    """Programs run call after call while the name first holds replica A, then A and B, then
    B only: B takes calls once it joins, A none once it left, and every program's every
    call completes."""
    servers = in_process_replicas(tiny_llama_dir)
    a, b = (s.address for s in servers)
    dns = ScriptedDns(engines=[a])
    router = start_router(replicas=(), replicas_dns=("engines:1",), resolver=dns,
                          dns_refresh_seconds=0.1, placement=make_placement("round_robin"),
                          router_token=TOKEN, poll_seconds=0.1)
    errors: list[BaseException] = []
    done = threading.Event()

    def program(index: int) -> None:
        try:
            with grpc.insecure_channel(router.address) as channel:
                stub = agentix_pb2_grpc.AgentixStub(channel)
                program_id = stub.StartProgram(pb.StartProgramRequest()).program_id
                turn = 0
                while not done.is_set() or turn < 2:
                    request = gen_request([3 + index, 4 + turn, 5], program_id,
                                          max_tokens=4, ignore_eos=True)
                    tokens, _, final = collect(stub.Generate(request, timeout=60))
                    assert len(tokens) == 4 and final is not None
                    turn += 1
                stub.EndProgram(pb.EndProgramRequest(program_id=program_id))
        except BaseException as exc:  # reported below
            errors.append(exc)

    def calls_on(server) -> int:  # each call generates 4 tokens
        return server.engine_loop.call(lambda e: e.counters.generation_tokens) // 4

    threads = [threading.Thread(target=program, args=(i,)) for i in range(4)]
    try:
        for thread in threads:
            thread.start()
        wait_until(lambda: errors or calls_on(servers[0]) >= 4, timeout=30, what="calls on A")
        assert not errors, errors
        with dns.lock:
            dns.answers["engines"] = [a, b]
        wait_until(lambda: calls_on(servers[1]) >= 4, timeout=30, what="B joining")
        with dns.lock:
            dns.answers["engines"] = [b]
        wait_until(lambda: router.call(lambda: router.router.replicas[0].retired),
                   timeout=10, what="A retiring")
        a_calls = calls_on(servers[0])
        b_calls = calls_on(servers[1])
        wait_until(lambda: calls_on(servers[1]) >= b_calls + 8, timeout=30,
                   what="calls on B only")
        assert calls_on(servers[0]) <= a_calls + len(threads)  # at most calls already placed
        done.set()
        for thread in threads:
            thread.join(60)
        assert not errors, errors
    finally:
        done.set()
        router.stop(grace=0)
        for server in servers:
            server.stop(grace=0)


def test_the_router_waits_for_its_first_replica_without_limit_and_says_it_is_alive(
        tiny_llama_dir):
    """`ready_timeout=0`: a router whose name resolves to nothing yet keeps waiting (a
    cluster's engines may load for minutes); once one joins it serves, and its "liveness"
    health name is SERVING whatever the replicas' health."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    server = in_process_replicas(tiny_llama_dir, count=1)[0]
    dns = ScriptedDns(engines=[])
    started: list = []
    thread = threading.Thread(target=lambda: started.append(start_router(
        replicas=(), replicas_dns=("engines:1",), resolver=dns, dns_refresh_seconds=0.05,
        placement=make_placement("round_robin"), router_token=TOKEN, ready_timeout=0)))
    thread.start()
    try:
        thread.join(1.0)
        assert thread.is_alive() and not started  # still waiting, past no deadline
        with dns.lock:
            dns.answers["engines"] = [server.address]
        thread.join(30)
        router = started[0]
        with grpc.insecure_channel(router.address) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            live = health.Check(health_pb2.HealthCheckRequest(service="liveness"))
            assert live.status == health_pb2.HealthCheckResponse.SERVING
    finally:
        thread.join(30)
        for router in started:
            router.stop(grace=0)
        server.stop(grace=0)
