"""Can other clients stall a victim's stream? Victim tokens/s and inter-token gaps, alone and
under gRPC and HTTP attacks.

    python -m bench.studies.hardening.stall [--model DIR] [--seconds S] [--server-root DIR]
                                            [--no-http] [--json]

Method. The server runs as its own process (`python -m server.cli serve --model DIR --port 0
--http-port 0`, run with cwd and PYTHONPATH set to `--server-root`, so an older checkout can be
measured with this script; one whose serve has no --http-port, or --no-http, runs without the
HTTP phases and says so in `http_skipped`). A victim thread streams one long call over gRPC
(prompt: a few token ids, `ignore_eos`, `max_tokens` up to --victim-max-tokens, repeated if it
finishes) and every delta's arrival time is recorded. Each phase: the attackers are spawned
(multiprocessing "spawn", so the clients' GIL does not distort the server measurement) and wait
ready; the victim starts and gets its first token; the attackers are released; after --ramp
seconds the measured window of S seconds begins. Victim tokens/s = tokens delivered inside the
window / its length; its inter-token gaps inside the window give `victim_gap_p99_ms`,
`victim_gap_max_ms` and `gap_ok` (largest gap <= 3 x the alone phase's P99;
bench.studies.hardening.stall_gaps).
Phases:

  alone         no attackers.
  huge_prompt   2 attackers loop on Generate with a 3.9 MB text prompt.
  plain_calls   control for stop_list: 2 attackers loop on the same calls without stop strings
                (the victim's share of an ordinary batch of three).
  stop_list     2 attackers loop on calls with the largest stop list the server accepts:
                200,000 strings of 10 chars, or, if a probe call is refused with
                INVALID_ARGUMENT, 16 strings of 256 chars (`stop_list.variant` says which).
  program_flood 2 attackers loop on StartProgram with 1 MB program ids, never ending them
                (short ids if a probe with a 1 MB id is refused with INVALID_ARGUMENT). Last,
                since its programs stay; stopped early if the server's RSS grows by more than
                --rss-guard-mb (`rss_guard_hit`).
  http_*        over the HTTP door, before program_flood: http_huge_body, http_slowloris,
                http_n16, http_sse_nonreader, http_program_ids
                (bench.studies.hardening.stall_http says what each sends; its answers are
                counted by HTTP status).

Refusals (INVALID_ARGUMENT, RESOURCE_EXHAUSTED) are normal for attackers: counted, then the
attacker loops on. An attack request is accepted once StartProgram returns or a call's first
response arrives; calls still streaming when the phase ends are cancelled. Per phase: the
victim's tokens/s, its ratio to alone, its P99 and largest inter-token gap and `gap_ok`,
attack requests accepted / refused (by status) / failed otherwise, and the server's RSS
before and after. Between phases the script waits until the server has no running or
waiting calls.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import random
import string
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

import grpc

from bench.studies.hardening.stall_gaps import gap_stats, gap_verdict, gaps_in
from bench.studies.hardening.stall_http import HTTP_PHASES, http_attacker, phase_info
from bench.support.server_process import MB, Server, git_commit, serves_http
from server import agentix_pb2 as pb
from server import agentix_pb2_grpc

REPO_ROOT = Path(__file__).resolve().parents[3]
HUGE_PROMPT_BYTES = 3_900_000
REFUSED = {"INVALID_ARGUMENT", "RESOURCE_EXHAUSTED"}
STOP_VARIANTS = {"200000x10": (200_000, 10), "16x256": (16, 256)}
VICTIM_PROMPT = [17, 42, 99, 7, 123, 55, 8, 77]  # token ids: valid in any vocab of >= 128
ATTACK_PROMPT = [11, 22, 33, 44]
PHASES = ("alone", "huge_prompt", "plain_calls", "stop_list", "http_huge_body", "http_slowloris",
          "http_n16", "http_sse_nonreader", "http_program_ids", "program_flood")


def code_name(error: grpc.RpcError) -> str:
    return error.code().name if hasattr(error, "code") else "UNKNOWN"


def wait_quiet(stub: agentix_pb2_grpc.AgentixStub, timeout: float = 120.0) -> float:
    """Wait until the server has no running or waiting calls; returns the seconds waited."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        try:
            stats = stub.EngineStats(pb.EngineStatsRequest(), timeout=30)
            if stats.calls_running == 0 and stats.calls_waiting == 0 \
                    and stats.calls_swapped == 0:
                break
        except grpc.RpcError:
            pass
        time.sleep(0.2)
    return time.monotonic() - started


# ----- requests ----------------------------------------------------------------------------

def stop_list(count: int, length: int, seed: int = 0) -> list[str]:
    """`count` distinct random lowercase strings of `length` chars."""
    rng = random.Random(seed)
    letters = string.ascii_lowercase
    return ["".join(rng.choices(letters, k=length - 6)) + f"{i:06x}" for i in range(count)]


def huge_prompt(nbytes: int = HUGE_PROMPT_BYTES) -> str:
    words = "the quick brown fox jumps over the lazy dog while agents call tools ".split()
    text = " ".join(words[i % len(words)] for i in range(nbytes // 4))
    return text[:nbytes]


def long_id(prefix: str, nbytes: int = MB) -> str:
    return prefix + "x" * (nbytes - len(prefix))


def generate_request(prompt: str | list[int], max_tokens: int,
                     stop: list[str] = ()) -> pb.GenerateRequest:
    request = pb.GenerateRequest(sampling=pb.SamplingParams(max_tokens=max_tokens,
                                                            ignore_eos=True, stop=stop))
    if isinstance(prompt, str):
        request.text = prompt
    else:
        request.token_ids.ids.extend(prompt)
    return request


# ----- attackers (each in its own spawned process) -------------------------------------------

def attacker(kind: str, address: str, spec: dict[str, Any], index: int, ready: Any, go: Any,
             stop: Any, results: Any) -> None:
    """Loop one attack until `stop`; put {accepted, refused: {code: n}, failed: {code: n},
    requests, seconds} on `results`."""
    channel = grpc.insecure_channel(address, options=[("grpc.max_send_message_length", -1)])
    stub = agentix_pb2_grpc.AgentixStub(channel)
    counts: dict[str, Any] = {"accepted": 0, "refused": {}, "failed": {}}
    if kind == "huge_prompt":
        request = generate_request(huge_prompt(), 1)
    elif kind in ("stop_list", "plain_calls"):
        stops = stop_list(*spec["stop"], seed=index) if kind == "stop_list" else []
        request = generate_request(ATTACK_PROMPT, spec["max_tokens"], stops)
    current: list[Any] = [None]

    def cancel_at_stop() -> None:  # a call still streaming when the phase ends is cancelled
        stop.wait()
        if current[0] is not None:
            current[0].cancel()

    threading.Thread(target=cancel_at_stop, daemon=True).start()
    ready.set()
    go.wait()
    started = time.monotonic()
    n = 0
    while not stop.is_set():
        n += 1
        try:
            if kind == "program_flood":
                prefix = f"flood-{os.getpid()}-{n}-"
                pid = long_id(prefix, spec["id_bytes"]) if spec["id_bytes"] > len(prefix) \
                    else prefix
                stub.StartProgram(pb.StartProgramRequest(program_id=pid), timeout=60)
                counts["accepted"] += 1
            else:
                current[0] = stub.Generate(request, timeout=300)
                if stop.is_set():
                    current[0].cancel()
                for i, _ in enumerate(current[0]):
                    counts["accepted"] += i == 0  # taken: its first response came
        except grpc.RpcError as error:
            code = code_name(error)
            if code == "CANCELLED" and stop.is_set():
                counts["cancelled_at_end"] = counts.get("cancelled_at_end", 0) + 1
                break
            bucket = counts["refused"] if code in REFUSED else counts["failed"]
            bucket[code] = bucket.get(code, 0) + 1
            if code not in REFUSED:
                time.sleep(0.05)  # e.g. UNAVAILABLE: do not spin
    counts["requests"] = n
    counts["seconds"] = time.monotonic() - started
    results.put(counts)
    channel.close()


def merge_counts(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """The attackers' counts added up (every count a part has: accepted, requests,
    cancelled_at_end, held_at_end, ...; refused and failed by code), with totals and rate."""
    total: dict[str, Any] = {"accepted": 0, "refused": {}, "failed": {}, "requests": 0,
                             "cancelled_at_end": 0}
    for part in parts:
        for key, value in part.items():
            if key in ("refused", "failed"):
                for code, n in value.items():
                    total[key][code] = total[key].get(code, 0) + n
            elif key != "seconds":
                total[key] = total.get(key, 0) + value
    total["refused_total"] = sum(total["refused"].values())
    total["failed_total"] = sum(total["failed"].values())
    seconds = max((p["seconds"] for p in parts), default=0.0)
    total["requests_per_s"] = round(total["requests"] / seconds, 1) if seconds else 0.0
    return total


# ----- the victim ----------------------------------------------------------------------------

class Victim:
    """Streams calls back to back on its own channel, recording (time, tokens, call) per
    delta."""

    def __init__(self, address: str, max_tokens: int) -> None:
        self.channel = grpc.insecure_channel(address)
        self.stub = agentix_pb2_grpc.AgentixStub(self.channel)
        self.request = generate_request(VICTIM_PROMPT, max_tokens)
        self.arrivals: list[tuple[float, int, int]] = []
        self.errors: dict[str, int] = {}
        self.calls = 0
        self.first_token = threading.Event()
        self._stop = threading.Event()
        self._call = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._call = self.stub.Generate(self.request)
            self.calls += 1
            try:
                for response in self._call:
                    if response.WhichOneof("kind") == "delta":
                        self.arrivals.append((time.monotonic(), len(response.delta.token_ids),
                                              self.calls))
                        self.first_token.set()
            except grpc.RpcError as error:
                if not self._stop.is_set():
                    code = code_name(error)
                    self.errors[code] = self.errors.get(code, 0) + 1
                    time.sleep(0.1)

    def tokens_between(self, t0: float, t1: float) -> int:
        return sum(n for t, n, _ in list(self.arrivals) if t0 <= t < t1)

    def stop(self) -> None:
        self._stop.set()
        if self._call is not None:
            self._call.cancel()
        self._thread.join(30)
        self.channel.close()


# ----- one phase -----------------------------------------------------------------------------

def run_phase(server: Server, stub: agentix_pb2_grpc.AgentixStub, kind: str | None,
              spec: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    quiet_wait = wait_quiet(stub)
    rss_before = server.rss_mb()
    ctx = mp.get_context("spawn")
    go, stop, results = ctx.Event(), ctx.Event(), ctx.Queue()
    procs, readies = [], []
    target, address = ((http_attacker, server.http_address) if kind in HTTP_PHASES
                       else (attacker, server.address))
    for i in range(args.attackers if kind else 0):
        ready = ctx.Event()
        proc = ctx.Process(target=target, args=(kind, address, spec, i, ready, go, stop,
                                                results), daemon=True)
        proc.start()
        procs.append(proc)
        readies.append(ready)
    for ready in readies:
        if not ready.wait(120):
            raise RuntimeError(f"{kind}: an attacker did not get ready")
    victim = Victim(server.address, spec["victim_max_tokens"])
    victim.start()
    if not victim.first_token.wait(120):
        raise RuntimeError(f"{kind or 'alone'}: the victim got no token in 120 s")
    go.set()
    time.sleep(args.ramp)
    t0 = time.monotonic()
    guard_hit = False
    while time.monotonic() - t0 < args.seconds:
        time.sleep(0.1)
        if kind == "program_flood" and server.rss_mb() - rss_before > args.rss_guard_mb:
            guard_hit = True
            break
    t1 = time.monotonic()
    tokens = victim.tokens_between(t0, t1)
    rss_peak = server.rss_mb()
    stop.set()
    parts = [results.get(timeout=180) for _ in procs]
    for proc in procs:
        proc.join(30)
    victim.stop()
    out: dict[str, Any] = {
        "victim_tokens": tokens, "window_s": round(t1 - t0, 3),
        "victim_tokens_per_s": round(tokens / (t1 - t0), 2), "victim_calls": victim.calls,
        **gap_stats(gaps_in(list(victim.arrivals), t0, t1)),
        "victim_errors": victim.errors, "quiet_wait_s": round(quiet_wait, 2),
        "server_rss_mb_before": round(rss_before, 1), "server_rss_mb_end": round(rss_peak, 1),
    }
    if kind:
        out["attack"] = merge_counts(parts)
    if kind == "program_flood":
        out["rss_guard_hit"] = guard_hit
    return out


# ----- probes: what the server accepts -------------------------------------------------------

def probe_stop_variant(stub: agentix_pb2_grpc.AgentixStub) -> tuple[str, dict[str, str]]:
    """The first stop-list variant a one-token call is not refused for (INVALID_ARGUMENT)."""
    refusals = {}
    for name, (count, length) in STOP_VARIANTS.items():
        try:
            for _ in stub.Generate(generate_request(ATTACK_PROMPT, 1,
                                                    stop_list(count, length)), timeout=120):
                pass
            return name, refusals
        except grpc.RpcError as error:
            if code_name(error) != "INVALID_ARGUMENT":
                raise
            refusals[name] = (error.details() or "")[:200]
    raise RuntimeError(f"every stop-list variant was refused: {refusals}")


def probe_id_bytes(stub: agentix_pb2_grpc.AgentixStub) -> tuple[int, str | None]:
    """1 MB if StartProgram takes a 1 MB id (that probe program is ended again), else 0
    (short ids), with the refusal's details."""
    program_id = long_id("probe-")
    try:
        stub.StartProgram(pb.StartProgramRequest(program_id=program_id), timeout=60)
    except grpc.RpcError as error:
        if code_name(error) != "INVALID_ARGUMENT":
            raise
        return 0, (error.details() or "")[:200]
    stub.EndProgram(pb.EndProgramRequest(program_id=program_id), timeout=60)
    return MB, None


# ----- main ----------------------------------------------------------------------------------

def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.studies.hardening.stall",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="model directory (default: SmolLM2-135M-Instruct)")
    parser.add_argument("--seconds", type=float, default=8.0, help="measured window per phase")
    parser.add_argument("--server-root", type=Path, default=REPO_ROOT,
                        help="checkout whose server code runs (default: this repository)")
    parser.add_argument("--policy", help="the server's --policy (default: its own default)")
    parser.add_argument("--attackers", type=int, default=2, help="attacker processes per attack")
    parser.add_argument("--ramp", type=float, default=0.5,
                        help="seconds between releasing the attackers and the window")
    parser.add_argument("--victim-max-tokens", type=int, default=2048,
                        help="max_tokens of each victim call (capped by the model's context)")
    parser.add_argument("--attack-max-tokens", type=int, default=256,
                        help="max_tokens of the stop_list / plain_calls attack calls")
    parser.add_argument("--rss-guard-mb", type=float, default=4000.0,
                        help="end program_flood early past this server RSS growth")
    parser.add_argument("--phases", default=",".join(PHASES),
                        help="comma-separated phases to run, in order")
    parser.add_argument("--no-http", action="store_true",
                        help="serve no HTTP port and skip the http_* phases (the gRPC-only run)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    if args.model is None:
        from engine.models.smollm2 import ensure_smollm2_dir
        args.model = str(ensure_smollm2_dir())
    extra = ["--policy", args.policy] if args.policy else []
    phases = [p.strip() for p in args.phases.split(",") if p.strip()]
    started = time.monotonic()
    report: dict[str, Any] = {
        "bench": "stall", "model": args.model, "server_root": str(args.server_root.resolve()),
        "server_commit": git_commit(args.server_root), "seconds": args.seconds,
        "attackers": args.attackers, "phases": {}}
    http = any(p in HTTP_PHASES for p in phases)
    if http and (args.no_http or not serves_http(args.server_root)):
        report["http_skipped"] = ("--no-http" if args.no_http
                                  else "the server has no --http-port")
        phases = [p for p in phases if p not in HTTP_PHASES]
        http = False
    with Server(args.model, args.server_root, extra, http=http) as server:
        report["server_start_s"] = round(time.monotonic() - started, 1)
        channel = grpc.insecure_channel(server.address,
                                        options=[("grpc.max_send_message_length", -1)])
        stub = agentix_pb2_grpc.AgentixStub(channel)
        max_len = stub.ModelInfo(pb.ModelInfoRequest(), timeout=60).max_model_len
        spec: dict[str, Any] = {
            "victim_max_tokens": max(1, min(args.victim_max_tokens,
                                            max_len - len(VICTIM_PROMPT) - 1)),
            "max_tokens": max(1, min(args.attack_max_tokens, max_len - len(ATTACK_PROMPT) - 1)),
            "attackers": args.attackers, "prompt": ATTACK_PROMPT,
            "http_max_tokens": max_len - len(ATTACK_PROMPT)}
        report.update(max_model_len=max_len, victim_max_tokens=spec["victim_max_tokens"],
                      attack_max_tokens=spec["max_tokens"])
        for phase in phases:
            kind = None if phase == "alone" else phase
            info: dict[str, Any] = {}
            if phase == "stop_list":
                variant, refusals = probe_stop_variant(stub)
                spec["stop"] = STOP_VARIANTS[variant]
                info = {"variant": variant, "probe_refusals": refusals}
            elif phase == "program_flood":
                spec["id_bytes"], refusal = probe_id_bytes(stub)
                info = {"id_bytes": spec["id_bytes"], "probe_refusal": refusal}
            elif phase == "huge_prompt":
                info = {"prompt_bytes": HUGE_PROMPT_BYTES}
            elif phase in HTTP_PHASES:
                info = phase_info(phase, spec)
            phase_started = time.monotonic()
            result = run_phase(server, stub, kind, spec, args)
            result.update(info, phase_s=round(time.monotonic() - phase_started, 1))
            report["phases"][phase] = result
            if not args.json:
                print(f"{phase}: {result['victim_tokens_per_s']} tokens/s", file=sys.stderr,
                      flush=True)
        channel.close()
    alone = report["phases"].get("alone", {})
    for result in report["phases"].values():
        result["ratio_to_alone"] = (round(result["victim_tokens_per_s"]
                                          / alone["victim_tokens_per_s"], 4)
                                    if alone.get("victim_tokens_per_s") else None)
        result["gap_ok"] = gap_verdict(result, alone.get("victim_gap_p99_ms"))
    return emit(report, started, args.json, print_table)


def emit(report: dict[str, Any], started: float, as_json: bool,
         print_table: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    """Stamp the run's length on `report`, print it (JSON or a table) and return it."""
    report["total_s"] = round(time.monotonic() - started, 1)
    if as_json:
        print(json.dumps(report, indent=2))
    else:
        print_table(report)
    return report


def print_table(report: dict[str, Any]) -> None:
    print(f"victim tokens/s, {report['seconds']:g} s windows, server {report['server_root']} "
          f"({(report['server_commit'] or '?')[:10]})"
          + (f"; HTTP phases skipped: {report['http_skipped']}" if "http_skipped" in report
             else ""))
    print("| phase | victim tok/s | ratio | P99 gap ms | max gap ms | gap ok | attack accepted "
          "| refused | failed | attack req/s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, r in report["phases"].items():
        a = r.get("attack")
        label = name + (f" ({r['variant']})" if "variant" in r else "") \
            + (f" (id {r['id_bytes']} B)" if "id_bytes" in r else "")
        cells = ([a["accepted"], a["refused_total"], a["failed_total"], a["requests_per_s"]]
                 if a else ["-"] * 4)
        gaps = [r["victim_gap_p99_ms"], r["victim_gap_max_ms"], r["gap_ok"]]
        print(f"| {label} | {r['victim_tokens_per_s']} | {r['ratio_to_alone']} | "
              + " | ".join(str(c) for c in gaps + cells) + " |")


if __name__ == "__main__":
    main()
