"""A soak of the whole serving stack: gRPC clients through the router and OpenAI HTTP clients
on the replicas' own doors, with cancels, aborts and disconnects, replica failovers, and an
executor step failing every few hundred steps; memory sampled as it runs.

    python -m bench.studies.soak --model DIR [--seconds 1800] [--json OUT]

Setup (one process): two replicas (`start_server`, swap preemption into a small host tier,
a small KV pool, program TTL `--program-ttl`) behind a router (`start_router`,
least_loaded placement). Each replica's executor fails one step in `--fail-every`
(RuntimeError): the engine fails exactly the calls of that step (reason "error") and goes
on. Every `--failover-every` seconds one replica, in turn, is stopped (grace 0) and
started again on its port: the router's health check loses it and finds it again.

Clients (threads, until the time is up): gRPC programs of 1-3 calls through the router
(5% cancelled after their first token, 5% aborted), and HTTP chat calls on a replica's
door (half streamed, 5% of those dropped mid-stream). Every call must end with a status
from the expected set (OUTCOMES); anything else is an error.

Recorded: outcomes by kind; the process's RSS and `sys.getallocatedblocks()` (Python's
heap, in objects) every `--sample-seconds`; at the end, after the clients stop and the
programs' TTL has passed, each replica's calls, device and host blocks in use, process-table
records and `check_integrity()`.
"""

from __future__ import annotations

import argparse
import http.client
import json
import logging
import random
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import grpc
import psutil

from scheduler.placement import make_placement
from server import agentix_pb2 as pb
from server import agentix_pb2_grpc

TOKEN = "soak-router-token"
# How a call may end: a finish reason, or a gRPC / HTTP status that says clearly what
# happened (a failover: UNAVAILABLE / 503 / connection refused; a failed step: "error" /
# 500; a program ended by its TTL or lost with its replica: NOT_FOUND / 404).
OUTCOMES = frozenset({
    "stop", "length", "abort", "error", "cancelled", "dropped",
    "grpc:UNAVAILABLE", "grpc:NOT_FOUND", "grpc:INTERNAL", "grpc:CANCELLED",
    "http:200", "http:404", "http:500", "http:503", "http:refused"})


class FlakyExecutor:
    """Runs steps through `inner`; every `every`-th step raises instead (after nothing ran)."""

    def __init__(self, inner: Any, every: int) -> None:
        self.inner, self.every, self.steps = inner, every, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def execute(self, plan):
        self.steps += 1
        if self.steps % self.every == 0:
            raise RuntimeError("soak: injected step failure")
        return self.inner.execute(plan)


@dataclass
class SoakReport:
    seconds: float
    outcomes: Counter = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)
    samples: list[tuple[float, float, int]] = field(default_factory=list)  # t, RSS MB, blocks
    failovers: int = 0
    injected_failures: int = 0
    end_state: list[dict[str, Any]] = field(default_factory=list)

    def record(self, outcome: str) -> None:
        self.outcomes[outcome] += 1
        if outcome not in OUTCOMES:
            self.errors.append(f"unexpected outcome {outcome}")

    def to_dict(self) -> dict[str, Any]:
        half = len(self.samples) // 2
        first, second = self.samples[:half] or self.samples, self.samples[half:]
        return {"seconds": self.seconds, "outcomes": dict(self.outcomes),
                "errors": self.errors[:20], "failovers": self.failovers,
                "injected_failures": self.injected_failures,
                "rss_mb_max_first_half": max(s[1] for s in first),
                "rss_mb_max_second_half": max(s[1] for s in second),
                "heap_blocks_max_first_half": max(s[2] for s in first),
                "heap_blocks_max_second_half": max(s[2] for s in second),
                "samples": self.samples, "end_state": self.end_state}


class _Replicas:
    """The replicas and their restarts on the same port."""

    def __init__(self, model_dir: str, fail_every: int, program_ttl: float) -> None:
        self.model_dir, self.fail_every, self.program_ttl = model_dir, fail_every, program_ttl
        self.lock = threading.Lock()
        self.servers = [self._start(0), self._start(0)]
        self.failed_steps = 0

    def _start(self, port: int):
        from engine import EngineConfig
        from server.app import start_server

        config = EngineConfig.from_flat(
            model=self.model_dir, block_size=8, num_kv_blocks=48, num_host_blocks=64,
            preemption_mode="swap", max_num_seqs=16, program_ttl=self.program_ttl,
            policy="fcfs", enable_prefix_caching=False, ttft_slo_tokens=None)  # as measured
        server = start_server(config, port=port, http_port=0, router_token=TOKEN,
                              served_model_name="soak")
        every = self.fail_every
        server.engine_loop.call(lambda e: setattr(e, "executor", FlakyExecutor(e.executor,
                                                                               every)))
        return server

    def restart(self, index: int) -> None:
        with self.lock:
            old = self.servers[index]
            port = int(old.address.rsplit(":", 1)[1])
            self.failed_steps += old.engine_loop.call(lambda e: e.executor.steps //
                                                      e.executor.every)
            old.stop(grace=0)
            self.servers[index] = self._start(port)

    def http_address(self, index: int) -> str:
        with self.lock:
            return self.servers[index].http_address

    def stop(self) -> None:
        for server in self.servers:
            self.failed_steps += server.engine_loop.call(lambda e: e.executor.steps //
                                                         e.executor.every)
            server.stop(grace=0)


def _grpc_client(address: str, deadline: float, rng: random.Random, report: SoakReport,
                 lock: threading.Lock) -> None:
    with grpc.insecure_channel(address) as channel:
        stub = agentix_pb2_grpc.AgentixStub(channel)
        while time.monotonic() < deadline:
            try:
                pid = stub.StartProgram(pb.StartProgramRequest(), timeout=10).program_id
            except grpc.RpcError as exc:
                with lock:
                    report.record(f"grpc:{exc.code().name}")
                continue
            for _ in range(rng.randint(1, 3)):
                outcome = _grpc_call(stub, pid, rng)
                with lock:
                    report.record(outcome)
            try:
                stub.EndProgram(pb.EndProgramRequest(program_id=pid), timeout=10)
            except grpc.RpcError:
                pass  # lost with a replica, or ended by its TTL: the outcomes say so


def _grpc_call(stub, pid: str, rng: random.Random) -> str:
    call_id = f"c{rng.getrandbits(48):x}"
    request = pb.GenerateRequest(
        program_id=pid, call_id=call_id,
        token_ids=pb.TokenIds(ids=[rng.randrange(3, 300) for _ in range(rng.randint(2, 40))]),
        sampling=pb.SamplingParams(max_tokens=rng.randint(1, 24), ignore_eos=True))
    action = rng.random()
    try:
        stream = stub.Generate(request, timeout=60)
        if action < 0.05:
            next(stream, None)
            stream.cancel()
            return "cancelled"
        if action < 0.10:
            stub.Abort(pb.AbortRequest(call_id=call_id), timeout=10)
        final = None
        for response in stream:
            if response.WhichOneof("kind") == "final":
                final = response.final
        return final.finish_reason if final is not None else "grpc:no final"
    except grpc.RpcError as exc:
        return f"grpc:{exc.code().name}"


def _http_client(replicas: _Replicas, deadline: float, rng: random.Random,
                 report: SoakReport, lock: threading.Lock) -> None:
    while time.monotonic() < deadline:
        host, port = replicas.http_address(rng.randrange(2)).rsplit(":", 1)
        stream = rng.random() < 0.5
        body = json.dumps({"model": "soak", "max_tokens": rng.randint(1, 24),
                           "ignore_eos": True, "stream": stream,
                           "messages": [{"role": "user", "content": "w5 w6 w7"}]})
        try:
            connection = http.client.HTTPConnection(host, int(port), timeout=60)
            connection.request("POST", "/v1/chat/completions", body=body,
                               headers={"Content-Type": "application/json"})
            response = connection.getresponse()
            if stream and response.status == 200 and rng.random() < 0.05:
                response.read(64)
                outcome = "dropped"
            else:
                response.read()
                outcome = f"http:{response.status}"
            connection.close()
        except (ConnectionError, OSError, http.client.HTTPException):
            outcome = "http:refused"
        with lock:
            report.record(outcome)


def run_soak(model_dir: str, seconds: float, fail_every: int = 300,
             failover_every: float = 60.0, program_ttl: float = 10.0,
             sample_seconds: float = 5.0, grpc_clients: int = 4, http_clients: int = 2,
             seed: int = 0) -> SoakReport:
    """Run the soak (see the module docstring) and return its report."""
    from server.router import start_router

    report = SoakReport(seconds)
    lock = threading.Lock()
    replicas = _Replicas(model_dir, fail_every, program_ttl)
    router = start_router(replicas=[s.address for s in replicas.servers],
                          placement=make_placement("least_loaded"), router_token=TOKEN,
                          poll_seconds=0.2)
    process = psutil.Process()
    started = time.monotonic()
    deadline = started + seconds
    threads = [threading.Thread(target=_grpc_client, args=(
        router.address, deadline, random.Random(seed * 100 + i), report, lock))
        for i in range(grpc_clients)]
    threads += [threading.Thread(target=_http_client, args=(
        replicas, deadline, random.Random(seed * 100 + 50 + i), report, lock))
        for i in range(http_clients)]
    try:
        for thread in threads:
            thread.start()
        next_sample, next_failover = started, started + failover_every
        while time.monotonic() < deadline:
            now = time.monotonic()
            if now >= next_sample:
                report.samples.append((round(now - started, 1),
                                       process.memory_info().rss / (1 << 20),
                                       sys.getallocatedblocks()))
                next_sample += sample_seconds
            if now >= next_failover:
                replicas.restart(report.failovers % 2)
                report.failovers += 1
                next_failover += failover_every
            time.sleep(0.1)
        for thread in threads:
            thread.join(120)
            if thread.is_alive():
                report.errors.append("a client did not finish within 120 s of the end")
        time.sleep(program_ttl + 2.0)  # programs cut by a failover expire by their TTL
        report.end_state = [server.engine_loop.call(_end_state) for server in
                            replicas.servers]
        for index, state in enumerate(report.end_state):
            if (state["calls"], state["kv_blocks_used"], state["host_blocks_used"],
                    state["programs"]) != (0, 0, 0, 0):
                report.errors.append(f"replica {index} not clean at the end: {state}")
    finally:
        router.stop(grace=0)
        replicas.stop()
    report.injected_failures = replicas.failed_steps
    return report


def _end_state(engine) -> dict[str, Any]:
    engine.check_integrity()
    stats = engine.stats()
    return {"calls": len(engine.calls), "kv_blocks_used": stats.kv_blocks_used,
            "host_blocks_used": stats.host_blocks_used,
            "programs": len(engine.scheduler.table)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True, help="model directory (with a tokenizer)")
    parser.add_argument("--seconds", type=float, default=1800.0)
    parser.add_argument("--fail-every", type=int, default=300, help="a failing step per N")
    parser.add_argument("--failover-every", type=float, default=60.0)
    parser.add_argument("--program-ttl", type=float, default=10.0)
    parser.add_argument("--sample-seconds", type=float, default=5.0)
    parser.add_argument("--json", help="write the report here")
    args = parser.parse_args(argv)
    # An injected failure logs its traceback on the engine thread: one line is enough here.
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("server.engine_loop").setLevel(logging.CRITICAL)
    report = run_soak(args.model, args.seconds, args.fail_every, args.failover_every,
                      args.program_ttl, args.sample_seconds).to_dict()
    if args.json:
        with open(args.json, "w") as out:
            json.dump(report, out, indent=1)
    summary = {k: v for k, v in report.items() if k not in ("samples",)}
    print(json.dumps(summary, indent=1))
    if report["errors"]:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
