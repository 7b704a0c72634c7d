#!/usr/bin/env python3
"""One-line summary of an aiperf run (stdlib only).

Reads OUTDIR/profile_export_aiperf.json (aiperf 0.13.0 summary export) and prints
output tokens/s, requests/s, mean TTFT and mean ITL.

    python3 bench/studies/openai_client_summary.py OUTDIR            # one line
    python3 bench/studies/openai_client_summary.py OUTDIR --markdown # markdown table row
    python3 bench/studies/openai_client_summary.py --markdown-header # table header

JSON keys used (each is {"unit": ..., "avg": ..., and for per-request metrics
p50/p90/p99/min/max/std}): output_token_throughput (tokens/sec),
request_throughput (requests/sec), time_to_first_token (ms),
inter_token_latency (ms), request_count (successful requests),
error_request_count (failed requests; absent when none failed),
benchmark_duration (sec), and input_config.phases[kind=profiling].concurrency.

Exits 2 if any request failed or none succeeded, so a broken run is not
taken for a benchmark result.
"""
import json
import os
import sys

EXPORT = "profile_export_aiperf.json"
HEADER = ("| concurrency | requests ok/err | output tok/s | req/s | TTFT mean ms "
          "| TTFT p50 ms | ITL mean ms | duration s |\n|---|---|---|---|---|---|---|---|")


def metric(d, key, stat="avg"):
    v = d.get(key)
    return v.get(stat) if isinstance(v, dict) else None


def fmt(x, nd=2):
    return "n/a" if x is None else f"{x:.{nd}f}"


def main(argv):
    if argv[1:] == ["--markdown-header"]:
        print(HEADER)
        return 0
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 1
    path = argv[1]
    if os.path.isdir(path):
        path = os.path.join(path, EXPORT)
    with open(path) as f:
        d = json.load(f)
    ok = int(metric(d, "request_count") or 0)
    err = int(metric(d, "error_request_count") or 0)
    phases = (d.get("input_config") or {}).get("phases") or []
    conc = next((p.get("concurrency") for p in phases if p.get("kind") == "profiling"), None)
    vals = dict(
        conc=conc if conc is not None else "?",
        ok=ok, err=err,
        otps=fmt(metric(d, "output_token_throughput"), 1),
        rps=fmt(metric(d, "request_throughput"), 3),
        ttft=fmt(metric(d, "time_to_first_token"), 1),
        ttft50=fmt(metric(d, "time_to_first_token", "p50"), 1),
        itl=fmt(metric(d, "inter_token_latency"), 2),
        dur=fmt(metric(d, "benchmark_duration"), 2),
    )
    if "--markdown" in argv[2:]:
        print("| {conc} | {ok}/{err} | {otps} | {rps} | {ttft} | {ttft50} | {itl} | {dur} |"
              .format(**vals))
    else:
        print("aiperf c={conc} ok={ok} err={err}: output {otps} tok/s | {rps} req/s | "
              "TTFT mean {ttft} ms (p50 {ttft50}) | ITL mean {itl} ms | {dur} s".format(**vals))
    if err or not ok:
        for e in d.get("error_summary") or []:
            print(f"  error x{e.get('count')}: {e.get('error_details')}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
