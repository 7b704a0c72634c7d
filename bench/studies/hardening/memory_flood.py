"""How much memory can a client make the server hold? Server RSS under StartProgram floods and
HTTP floods.

    python -m bench.studies.hardening.memory_flood [--model DIR] [--server-root DIR] [--json]

Method. Each flood gets a fresh server process (`python -m server.cli serve --model DIR
--port 0`, with `--http-port 0` for the http_* floods, cwd and PYTHONPATH `--server-root`;
see bench.support.server_process.Server), so that one flood's programs cannot fill a program cap the
other would then hit. After a warm-up (a few short programs started and ended, one short
call; for the http_* floods also three 1-token completions and one refused body over HTTP)
and a 1 s settle, the server's RSS (psutil, on the server's pid) is the baseline; after each
flood step it is read again after --settle seconds.

  program_flood  --programs (200) StartProgram calls, each with its own 1 MB program id,
                 never ended.
  tenant_flood   --cycles (5) cycles of --cycle-programs (100) programs, each started with its
                 own 1 MB tenant name (without auth the request's tenant field is used) and
                 ended at once; RSS after every cycle.
  http_program_ids     --http-programs (2,000) 1-token /v1/completions on one keep-alive
                       connection, each with a new X-Program-Id (200, or 429 past the
                       program caps; the programs are never ended).
  http_refused_bodies  --http-bodies (200) POST /v1/completions, alternately a 1 MB body that
                       is not JSON and a prompt of 1 MB + 1 byte (past the default
                       --max-prompt-bytes): 400 expected.

A checkout whose serve has no --http-port skips the http_* floods (`skipped`). Every refusal (by
status: INVALID_ARGUMENT, RESOURCE_EXHAUSTED, ...; HTTP: by status code, or by error class for a
connection that failed) is counted and the flood goes on. Reported: RSS before and after (after
each cycle), growth in MB, and the requests accepted and refused. Default model: the tiny test
model (/tmp/tinyllm, built if missing); memory figures do not need SmolLM2.
"""

from __future__ import annotations

import argparse
import http.client
import json
import time
from pathlib import Path
from typing import Any, Callable

import grpc

from bench.studies.hardening.stall import REPO_ROOT, code_name, emit, long_id
from bench.studies.hardening.stall_http import HttpClient
from bench.support.server_process import MB, Server, git_commit, serves_http
from server import agentix_pb2 as pb
from server import agentix_pb2_grpc

TINY_DIR = Path("/tmp/tinyllm")
PROMPT = [5, 6, 7, 8]  # token ids: valid in any vocab of >= 128


def ensure_tiny_model(path: Path = TINY_DIR) -> str:
    """The tests' tiny llama (`agentix_testing.tiny_llama`), built once at `path`."""
    if not (path / "config.json").exists() or not (path / "tokenizer.json").exists():
        from agentix_testing.tiny_llama import build_tiny_llama, save_word_tokenizer
        build_tiny_llama(str(path), tie_word_embeddings=True)
        save_word_tokenizer(str(path))
    return str(path)


class Counter:
    """Accepted requests and refusals by status code."""

    def __init__(self) -> None:
        self.accepted = 0
        self.refused: dict[str, int] = {}

    def call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            result = fn(*args, **kwargs)
        except grpc.RpcError as error:
            code = code_name(error)
            self.refused[code] = self.refused.get(code, 0) + 1
            return None
        self.accepted += 1
        return result

    def post(self, client: HttpClient, path: str, body: bytes,
             headers: dict[str, str] | None = None) -> None:
        """POST on `client`: 2xx accepted, else refused by status (or by error class)."""
        try:
            status = client.post(path, body, headers)
        except (OSError, http.client.HTTPException) as error:
            self.refused[type(error).__name__] = self.refused.get(type(error).__name__, 0) + 1
            return
        if 200 <= status < 300:
            self.accepted += 1
        else:
            self.refused[str(status)] = self.refused.get(str(status), 0) + 1

    def as_dict(self) -> dict[str, Any]:
        return {"accepted": self.accepted, "refused": dict(self.refused),
                "refused_total": sum(self.refused.values())}


def connect(server: Server) -> tuple[grpc.Channel, agentix_pb2_grpc.AgentixStub]:
    channel = grpc.insecure_channel(server.address,
                                    options=[("grpc.max_send_message_length", -1)])
    return channel, agentix_pb2_grpc.AgentixStub(channel)


def warm_up(stub: agentix_pb2_grpc.AgentixStub, settle: float) -> None:
    for i in range(5):
        started = stub.StartProgram(pb.StartProgramRequest(tenant=f"warm-{i}"), timeout=60)
        stub.EndProgram(pb.EndProgramRequest(program_id=started.program_id), timeout=60)
    request = pb.GenerateRequest(sampling=pb.SamplingParams(max_tokens=8, ignore_eos=True))
    request.token_ids.ids.extend(PROMPT)
    for _ in stub.Generate(request, timeout=120):
        pass
    time.sleep(settle)


def program_flood(server: Server, args: argparse.Namespace) -> dict[str, Any]:
    channel, stub = connect(server)
    warm_up(stub, args.settle)
    before = server.rss_mb()
    counter = Counter()
    started = time.monotonic()
    for n in range(args.programs):
        counter.call(stub.StartProgram,
                     pb.StartProgramRequest(program_id=long_id(f"flood-{n}-", args.id_bytes)),
                     timeout=60)
    seconds = time.monotonic() - started
    time.sleep(args.settle)
    after = server.rss_mb()
    channel.close()
    return {"requests": args.programs, "id_bytes": args.id_bytes, **counter.as_dict(),
            "flood_s": round(seconds, 2), "rss_mb_before": round(before, 1),
            "rss_mb_after": round(after, 1), "growth_mb": round(after - before, 1)}


def tenant_flood(server: Server, args: argparse.Namespace) -> dict[str, Any]:
    channel, stub = connect(server)
    warm_up(stub, args.settle)
    before = server.rss_mb()
    starts, ends = Counter(), Counter()
    cycles = []
    started = time.monotonic()
    for cycle in range(args.cycles):
        for n in range(args.cycle_programs):
            tenant = long_id(f"tenant-{cycle}-{n}-", args.id_bytes)
            reply = starts.call(stub.StartProgram, pb.StartProgramRequest(tenant=tenant),
                                timeout=60)
            if reply is not None:
                ends.call(stub.EndProgram, pb.EndProgramRequest(program_id=reply.program_id),
                          timeout=60)
        time.sleep(args.settle)
        rss = server.rss_mb()
        cycles.append({"cycle": cycle + 1, "rss_mb": round(rss, 1),
                       "growth_mb": round(rss - before, 1)})
    seconds = time.monotonic() - started
    channel.close()
    after = cycles[-1]["rss_mb"] if cycles else before
    growth = after - before
    return {"cycles": args.cycles, "cycle_programs": args.cycle_programs,
            "tenant_bytes": args.id_bytes, "starts": starts.as_dict(), "ends": ends.as_dict(),
            "flood_s": round(seconds, 2), "rss_mb_before": round(before, 1),
            "rss_mb_after": round(after, 1), "growth_mb": round(growth, 1),
            "growth_mb_per_cycle": round(growth / args.cycles, 1) if args.cycles else 0.0,
            "per_cycle": cycles}


def http_flood(server: Server, args: argparse.Namespace, requests: int,
               make: Callable[[int], tuple[bytes, dict[str, str] | None]]) -> dict[str, Any]:
    """Warm up (gRPC and HTTP), then POST `make(n)` = (body, headers) for n < `requests` to
    /v1/completions on one keep-alive connection; RSS before and after."""
    channel, stub = connect(server)
    warm_up(stub, 0.0)
    client = HttpClient(server.http_address)
    warm = Counter()
    for body in [json.dumps({"prompt": PROMPT, "max_tokens": 1}).encode()] * 3 + [b"{"]:
        warm.post(client, "/v1/completions", body)
    time.sleep(args.settle)
    before = server.rss_mb()
    counter = Counter()
    started = time.monotonic()
    for n in range(requests):
        counter.post(client, "/v1/completions", *make(n))
    seconds = time.monotonic() - started
    time.sleep(args.settle)
    after = server.rss_mb()
    client.close()
    channel.close()
    return {"requests": requests, **counter.as_dict(), "flood_s": round(seconds, 2),
            "rss_mb_before": round(before, 1), "rss_mb_after": round(after, 1),
            "growth_mb": round(after - before, 1)}


def http_program_ids(server: Server, args: argparse.Namespace) -> dict[str, Any]:
    body = json.dumps({"prompt": PROMPT, "max_tokens": 1}).encode()
    return http_flood(server, args, args.http_programs,
                      lambda n: (body, {"X-Program-Id": f"http-flood-{n}"}))


def http_refused_bodies(server: Server, args: argparse.Namespace) -> dict[str, Any]:
    bodies = (b"{" + b"x" * (MB - 1), json.dumps({"prompt": "a " * (MB // 2) + "a"}).encode())
    result = http_flood(server, args, args.http_bodies, lambda n: (bodies[n % 2], None))
    return {**result, "bodies": ["1 MB, not JSON", "a prompt of 1 MB + 1 byte"]}


FLOODS = {"program_flood": program_flood, "tenant_flood": tenant_flood,
          "http_program_ids": http_program_ids, "http_refused_bodies": http_refused_bodies}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.studies.hardening.memory_flood",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help=f"model directory (default: the tiny model, {TINY_DIR})")
    parser.add_argument("--server-root", type=Path, default=REPO_ROOT,
                        help="checkout whose server code runs (default: this repository)")
    parser.add_argument("--programs", type=int, default=200, help="program_flood's programs")
    parser.add_argument("--cycles", type=int, default=5, help="tenant_flood's cycles")
    parser.add_argument("--cycle-programs", type=int, default=100,
                        help="programs started and ended per tenant_flood cycle")
    parser.add_argument("--id-bytes", type=int, default=MB,
                        help="length of each program id / tenant name")
    parser.add_argument("--http-programs", type=int, default=2000,
                        help="http_program_ids' requests (each a new X-Program-Id)")
    parser.add_argument("--http-bodies", type=int, default=200,
                        help="http_refused_bodies' requests")
    parser.add_argument("--settle", type=float, default=1.0,
                        help="seconds to wait before each RSS reading")
    parser.add_argument("--floods", default=",".join(FLOODS),
                        help="comma-separated floods to run")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    model = args.model or ensure_tiny_model()
    names = [f.strip() for f in args.floods.split(",") if f.strip()]
    started = time.monotonic()
    report: dict[str, Any] = {
        "bench": "memory_flood", "model": model,
        "server_root": str(args.server_root.resolve()),
        "server_commit": git_commit(args.server_root), "floods": {}}
    http = any(name.startswith("http_") for name in names) and serves_http(args.server_root)
    for name in names:
        if name.startswith("http_") and not http:
            report["floods"][name] = {"skipped": "the server has no --http-port"}
            continue
        flood_started = time.monotonic()
        with Server(model, args.server_root, http=name.startswith("http_")) as server:
            result = FLOODS[name](server, args)
        result["run_s"] = round(time.monotonic() - flood_started, 1)
        report["floods"][name] = result
    return emit(report, started, args.json, print_table)


def print_table(report: dict[str, Any]) -> None:
    print(f"server RSS, server {report['server_root']} "
          f"({(report['server_commit'] or '?')[:10]})")
    print("| flood | requests | accepted | refused | RSS before MB | RSS after MB | growth MB |")
    print("|---|---|---|---|---|---|---|")
    for name, r in report["floods"].items():
        if "skipped" in r:
            print(f"| {name} | skipped: {r['skipped']} | | | | | |")
            continue
        if "requests" in r:
            requests, counts = r["requests"], r
        else:
            requests, counts = r["cycles"] * r["cycle_programs"], r["starts"]
        print(f"| {name} | {requests} | {counts['accepted']} | {counts['refused_total']} | "
              f"{r['rss_mb_before']} | {r['rss_mb_after']} | {r['growth_mb']} |")
    tenant = report["floods"].get("tenant_flood")
    if tenant:
        print("tenant_flood RSS growth after each cycle (MB): "
              + ", ".join(str(c["growth_mb"]) for c in tenant["per_cycle"]))


if __name__ == "__main__":
    main()
