"""What constrained decoding costs on this CPU, per library: `python -m bench.studies.grammar.cost
[--json] [--batch 64] [--vocab 49k,128k] [--libraries llguidance,xgrammar,outlines_core]
[--steps 96] [--warmup 16] [--threads 2] [--save DIR]`.

Method. Vocabularies (`bench.studies.grammar.vocab`): `49k` is SmolLM2-135M-Instruct's tokenizer
(49,152 ids); `128k` is a byte-level BPE trained on ShareGPT, a stand-in for Llama-3's 128k
vocabulary (128,000 trained tokens + 256 special = 128,256 ids). Adapters:
`bench.studies.grammar.backends`. Every measurement runs in a fresh worker process (so "cold" is
cold, and a compile that runs away is cut off by `--worker-timeout` without losing what was
measured before it): per vocabulary, first one worker that steps all libraries' matchers in
turn (the mask cost, so that each library's steps see the same machine load), then one worker
per library for the rest:

1. setup: the library's tokenizer info from the HF tokenizer (llguidance `LLTokenizer`,
   xgrammar `TokenizerInfo` + `GrammarCompiler`, outlines-core `Vocabulary`).
2. compile, for `TOOL_SCHEMA` (a function's arguments: a string, an enum, a bounded integer, an
   array of strings, a nested object; required fields; additionalProperties false) and then for
   any JSON object (`{"type": "object"}`): cold (first compile), first mask (a new matcher and
   its first bitmask fill: llguidance builds its lexer lazily, so this is where it pays), cached
   (compiling the same grammar again, through the library's cache where it has one; skipped
   after a cold compile over 1 s, which only cache-less libraries take) and the median time of
   a new matcher from the compiled grammar.
3. mask at batch `--batch` (`bench.studies.grammar.mask`): that many matchers, matcher i fed a
   different valid compact instance of the schema (`instance(i)`, tokenized by the HF
   tokenizer, EOS appended) and started `i mod len` tokens in, so they are not in lockstep.
   Each step fills the [batch, ceil(V / 32)] int32 bitmask of all matchers row by row on one
   thread, and again with the library's parallel / batched fill where it has one (`--threads`
   threads), checks both, then advances every matcher by its next token. The first `--warmup`
   steps are reported apart (mean); the next `--steps` give median and p90 wall ms per step,
   wall us per token (median / batch) and CPU us per token (CPU time is not inflated by other
   jobs on the machine: it is the cost figure here).
4. GIL: while this thread makes 32 batched fill calls, another thread appends timestamps in
   a tight Python loop (switch interval 0.1 ms); reported is the share of calls with a
   timestamp strictly inside the call. A call that releases the GIL lets the other thread run
   during it (share near 1, load permitting); one that holds it does not (near 0). This decides
   whether fills on a helper thread can overlap the engine thread's forward pass. One-row
   fills (8-120 us) are shorter than a waiting thread's wake-up, so the probe cannot see them;
   the table gives what each binding does instead (`gil_note` of the adapter).
5. apply: the library's torch helper setting -inf in a [batch, V] fp32 logits tensor (first
   call apart: two of them `torch.compile`), and the plain-torch fallback
   (`grammar_backends.apply_plain`) as a control; median of 20.
6. sanity: the number of tokens each library accepts of hand-made sequences (valid instance +
   EOS, a wrong quote, an out-of-range integer, an extra key, a wrong enum value, the schema
   between `<tool_call>` tags, any-object cases); the parent reports where libraries disagree.

xgrammar and outlines-core are not project dependencies (the engine uses llguidance):
`.venv/bin/pip install -c constraints.txt xgrammar outlines-core` before a full run.
Workers run torch with 1 thread. The load average is recorded: other jobs may share the CPU,
which inflates wall times (not CPU times); compare libraries within one run.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from bench.support.cpu_model import cpu_model

TOOL_SCHEMA = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "description": "What to look for."},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit", "kelvin"]},
        "max_results": {"type": "integer", "minimum": 1, "maximum": 50},
        "tags": {"type": "array", "items": {"type": "string"}},
        "location": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "country": {"type": "string"}},
            "required": ["city", "country"],
            "additionalProperties": False,
        },
    },
    "required": ["query", "unit", "max_results", "location"],
    "additionalProperties": False,
}
WORDS = ("weather", "forecast", "rain", "storm", "warm", "cold", "weekend", "tomorrow", "beach",
         "hiking", "trip", "wind", "snow", "morning", "evening", "flight", "festival", "river")
PLACES = (("Paris", "France"), ("Lagos", "Nigeria"), ("Osaka", "Japan"), ("Lima", "Peru"),
          ("Oslo", "Norway"), ("Austin", "United States"), ("Pune", "India"), ("Perth", "Australia"))
TAG_BEGIN, TAG_END = "<tool_call>", "</tool_call>"
RECOMPILE_LIMIT_S = 1.0


@dataclass(frozen=True)
class Config:
    batch: int = 64
    steps: int = 96
    warmup: int = 16
    threads: int = 2


def instance(i: int) -> dict:
    """The i-th valid instance of `TOOL_SCHEMA` (deterministic; lengths and fields vary)."""
    rng = random.Random(i)
    city, country = PLACES[rng.randrange(len(PLACES))]
    value: dict[str, Any] = {
        "query": " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 8))),
        "unit": rng.choice(TOOL_SCHEMA["properties"]["unit"]["enum"]),
        "max_results": rng.randint(1, 50),
    }
    if i % 3:
        value["tags"] = [rng.choice(WORDS) for _ in range(rng.randint(0, 4))]
    value["location"] = {"city": city, "country": country}
    return value


def compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def sanity_texts() -> dict[str, tuple[str, str]]:
    """Case name -> (grammar: tool / tagged / object, text); EOS is appended to each."""
    good = compact(instance(1))
    return {
        "valid instance": ("tool", good),
        "wrong quote ('...')": ("tool", good.replace('"query":"', "\"query\":'", 1)),
        "max_results 99 (> maximum)": ("tool", compact({**instance(1), "max_results": 99})),
        "extra key (additionalProperties)": ("tool", good[:-1] + ',"extra":1}'),
        "unit 'rankine' (not in enum)": ("tool", compact({**instance(1), "unit": "rankine"})),
        "missing required 'location'": ("tool", compact({k: v for k, v in instance(1).items() if k != "location"})),
        "tagged valid": ("tagged", TAG_BEGIN + good + TAG_END),
        "tagged, no closing tag": ("tagged", TAG_BEGIN + good),
        "object: nested valid": ("object", '{"a":[1,2.5,{"b":null}],"c":"d","e":true}'),
        "object: top-level array": ("object", "[1,2]"),
        "object: nesting depth 5": ("object", '{"a":{"b":{"c":{"d":{"e":1}}}}}'),
    }


# ---------------------------------------------------------------- worker (one library, vocab)

def run_worker(library: str, vocab: str, cfg: Config, emit: Callable[[str, dict], None]) -> None:
    """Measure `library` on `vocab`, emitting each section as soon as it is done."""
    import torch

    from bench.studies.grammar.backends import make_backend, vocab_size
    from bench.studies.grammar.vocab import load_tokenizer

    torch.set_num_threads(1)
    tokenizer = load_tokenizer(vocab)
    started = time.perf_counter()
    backend = make_backend(library, tokenizer, cfg.threads)
    setup_s = time.perf_counter() - started
    size = vocab_size(tokenizer)
    emit("setup", {"tokenizer_info_s": setup_s, "vocab_size": size, "eos": backend.eos,
                   "batch_fill": backend.batch_fill is not None, "cache": backend.cache_note,
                   "gil_note": backend.gil_note})
    encode = lambda text: tokenizer.encode(text, add_special_tokens=False) + [backend.eos]  # noqa: E731
    tool, stats = compile_stats(backend, lambda: backend.compile_schema(TOOL_SCHEMA), size)
    emit("compile_tool", stats)
    sequences = [encode(compact(instance(i))) for i in range(cfg.batch)]
    emit("gil", gil_probe(backend, tool, sequences, size))
    emit("apply", apply_bench(backend, torch.randn(cfg.batch, size), last_bitmask(backend, tool, sequences, size)))
    tagged = backend.compile_tagged(TOOL_SCHEMA, TAG_BEGIN, TAG_END)
    grammars = {"tool": tool, "tagged": tagged}
    emit("sanity", sanity(backend, grammars, encode, only=("tool", "tagged")))
    grammars["object"], stats = compile_stats(backend, backend.compile_any_object, size)
    emit("compile_object", stats)
    emit("sanity", sanity(backend, grammars, encode, only=("object",)))


def run_mask_worker(vocab: str, libraries: Sequence[str], cfg: Config, emit: Callable[[str, dict], None]) -> None:
    """Mask cost of all `libraries` on `vocab`, stepped in turn (`bench.studies.grammar.mask`); the
    order rotates every step. Emits {"library": summary} as section "mask"."""
    import torch

    from bench.studies.grammar.backends import make_backend, vocab_size
    from bench.studies.grammar.mask import MaskRun
    from bench.studies.grammar.vocab import load_tokenizer

    torch.set_num_threads(1)
    tokenizer = load_tokenizer(vocab)
    size = vocab_size(tokenizer)
    runs = {}
    for library in libraries:
        backend = make_backend(library, tokenizer, cfg.threads)
        sequences = [tokenizer.encode(compact(instance(i)), add_special_tokens=False) + [backend.eos]
                     for i in range(cfg.batch)]
        runs[library] = MaskRun(backend, backend.compile_schema(TOOL_SCHEMA), sequences, size)
    order = list(runs)
    for step in range(cfg.warmup + cfg.steps):
        for library in order[step % len(order):] + order[: step % len(order)]:
            runs[library].step(row_first=step % 2 == 0)
    emit("mask", {library: run.summary(cfg.warmup) for library, run in runs.items()})


def compile_stats(backend: Any, compile_fn: Callable[[], Any], size: int) -> tuple[Any, dict]:
    """(compiled grammar, {cold_s, first_mask_s, cached_s, new_matcher_s}); the second compile
    is skipped (cached_s None) when the first took over `RECOMPILE_LIMIT_S`: only libraries
    without a cache are that slow, and they would pay the cold time again."""
    import torch

    bitmask = torch.full((1, (size + 31) // 32), -1, dtype=torch.int32)
    started = time.perf_counter()
    compiled = compile_fn()
    cold = time.perf_counter() - started
    started = time.perf_counter()
    backend.fill_row(backend.new_matcher(compiled), bitmask, 0)
    first_mask = time.perf_counter() - started
    cached = None
    if cold <= RECOMPILE_LIMIT_S:
        started = time.perf_counter()
        compile_fn()
        cached = time.perf_counter() - started
    times = []
    for _ in range(20):
        started = time.perf_counter()
        backend.new_matcher(compiled)
        times.append(time.perf_counter() - started)
    return compiled, {"cold_s": cold, "first_mask_s": first_mask, "cached_s": cached,
                      "new_matcher_s": statistics.median(times)}


def last_bitmask(backend: Any, compiled: Any, sequences: list[list[int]], size: int) -> Any:
    """A realistic [batch, ceil(V / 32)] bitmask: the matchers at their start offsets."""
    import torch

    from bench.studies.grammar.mask import start_matchers

    matchers, _ = start_matchers(backend, compiled, sequences)
    bitmask = torch.full((len(matchers), (size + 31) // 32), -1, dtype=torch.int32)
    for row, matcher in enumerate(matchers):
        backend.fill_row(matcher, bitmask, row)
    return bitmask


def gil_probe(backend: Any, compiled: Any, sequences: list[list[int]], size: int) -> dict:
    """Share of batched fill calls during which another Python thread ran (see the module
    docstring); empty for a library without a batched fill."""
    import torch

    from bench.studies.grammar.mask import start_matchers

    if backend.batch_fill is None:
        return {}
    matchers, _ = start_matchers(backend, compiled, sequences)
    bitmask = torch.full((len(matchers), (size + 31) // 32), -1, dtype=torch.int32)
    return {"fill_batch": _ran_during([lambda: backend.batch_fill(matchers, bitmask)] * 32)}


def _ran_during(calls: list[Callable[[], None]]) -> float:
    """Run `calls` on this thread while another thread appends timestamps in a tight Python
    loop (switch interval 0.1 ms); the share of calls with a timestamp strictly inside."""
    import bisect
    from array import array

    beats, stop = array("d"), threading.Event()

    def heartbeat() -> None:
        clock, append, stopped = time.perf_counter, beats.append, stop.is_set
        while not stopped():
            append(clock())

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-4)
    thread = threading.Thread(target=heartbeat)
    try:
        thread.start()
        time.sleep(0.01)
        spans = []
        for call in calls:
            started = time.perf_counter()
            call()
            spans.append((started, time.perf_counter()))
    finally:
        stop.set()
        thread.join()
        sys.setswitchinterval(old)
    inside = sum(bisect.bisect_right(beats, start) < bisect.bisect_left(beats, end) for start, end in spans)
    return inside / len(spans)


def apply_bench(backend: Any, logits: Any, bitmask: Any, reps: int = 20) -> dict:
    """First call and median ms of the library's apply helper and of the plain-torch fallback."""
    from bench.studies.grammar.backends import apply_plain

    result = {}
    for name, fn in (("library", backend.apply), ("plain_torch", apply_plain)):
        work = logits.clone()
        started = time.perf_counter()
        try:
            fn(work, bitmask)
        except Exception as exc:  # noqa: BLE001  (a compile failure is a result here)
            result[name] = {"error": f"{type(exc).__name__}: {str(exc)[:200]}"}
            continue
        first = time.perf_counter() - started
        times = []
        for _ in range(reps):
            work.copy_(logits)
            started = time.perf_counter()
            fn(work, bitmask)
            times.append(time.perf_counter() - started)
        result[name] = {"first_ms": 1e3 * first, "median_ms": 1e3 * statistics.median(times)}
    check, expect = logits.clone(), logits.clone()
    backend.apply(check, bitmask)
    apply_plain(expect, bitmask)
    result["matches_plain"] = bool((check == expect).all())
    return result


def sanity(backend: Any, grammars: dict, encode: Callable[[str], list[int]], only: Sequence[str]) -> dict:
    """Case -> "accepted/total" tokens (EOS included) for the cases on the grammars `only`."""
    verdicts = {}
    for case, (grammar, text) in sanity_texts().items():
        if grammar not in only:
            continue
        tokens = encode(text)
        matcher = backend.new_matcher(grammars[grammar])
        accepted = 0
        for token in tokens:
            if not backend.advance(matcher, token):
                break
            accepted += 1
        verdicts[case] = f"{accepted}/{len(tokens)}"
    return verdicts


def worker_main(spec: str, cfg: Config) -> None:
    """`spec` is `LIBRARY:VOCAB` (one library) or `mask:VOCAB:LIB+LIB+...` (interleaved mask)."""

    def emit(section: str, data: dict) -> None:
        print(json.dumps({"section": section, "data": data}), flush=True)

    parts = spec.split(":")
    if parts[0] == "mask":
        run_mask_worker(parts[1], parts[2].split("+"), cfg, emit)
    else:
        run_worker(parts[0], parts[1], cfg, emit)


# ---------------------------------------------------------------- parent

def run_all(libraries: Sequence[str], vocabs: Sequence[str], cfg: Config, timeout: float) -> dict:
    """Prepare the vocabularies (training the 128k one if needed), then one worker per pair."""
    from bench.studies.grammar.vocab import load_tokenizer

    for vocab in vocabs:
        load_tokenizer(vocab)
    report: dict[str, Any] = {"machine": machine(), "versions": versions(), "config": asdict(cfg),
                              "worker_timeout_s": timeout, "runs": {}}
    for vocab in vocabs:
        mask = run_one(f"mask:{vocab}:{'+'.join(libraries)}", cfg, timeout)
        for library in libraries:
            run = run_one(f"{library}:{vocab}", cfg, timeout)
            if library in mask.get("mask", {}):
                run["mask"] = mask["mask"][library]
            elif "error" in mask:
                run["mask_error"] = mask["error"]
            report["runs"].setdefault(library, {})[vocab] = run
    report["machine"]["loadavg_end"] = os.getloadavg()
    return report


def run_one(spec: str, cfg: Config, timeout: float) -> dict:
    """Run worker `spec` (see `worker_main`) in a fresh process; its sections, wall time, the
    load average after it, and "error" if it failed or timed out."""
    command = [sys.executable, "-m", "bench.studies.grammar.cost", "--worker", spec,
               "--batch", str(cfg.batch), "--steps", str(cfg.steps), "--warmup", str(cfg.warmup),
               "--threads", str(cfg.threads)]
    started = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        timed_out = True
    run: dict[str, Any] = {"wall_s": time.perf_counter() - started, "loadavg": os.getloadavg()}
    for line in out.splitlines():
        if line.startswith("{"):
            record = json.loads(line)
            if record["section"] == "sanity":
                run.setdefault("sanity", {}).update(record["data"])
            else:
                run[record["section"]] = record["data"]
    if timed_out:
        run["error"] = f"worker timed out after {timeout:.0f} s"
    elif proc.returncode != 0:
        last = [line for line in err.splitlines() if line.strip()][-1:] or [""]
        run["error"] = f"worker exit {proc.returncode}: {last[0].strip()[:300]}"
    print(f"{spec}: {run['wall_s']:.0f} s{' ' + run['error'] if 'error' in run else ''}",
          file=sys.stderr, flush=True)
    return run


def machine() -> dict:
    return {"cpu": cpu_model(), "loadavg_start": os.getloadavg()}


def versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    result = {}
    for name in ("llguidance", "xgrammar", "outlines-core", "apache-tvm-ffi", "torch", "transformers", "tokenizers"):
        try:
            result[name] = version(name)
        except PackageNotFoundError:
            result[name] = None
    return result


# ---------------------------------------------------------------- report

def markdown(report: dict) -> str:
    """The report as Markdown tables."""
    runs, cfg = report["runs"], report["config"]
    pairs = [(lib, vocab, run) for lib, by_vocab in runs.items() for vocab, run in by_vocab.items()]
    pairs.sort(key=lambda p: (p[1] != "49k", p[1], p[0]))
    m = report["machine"]
    lines = [
        "# Constrained decoding: cost per library on this CPU",
        "",
        f"`python -m bench.studies.grammar.cost --batch {cfg['batch']} --steps {cfg['steps']} "
        f"--warmup {cfg['warmup']} --threads {cfg['threads']}`; {m['cpu']}; load average "
        f"{_load(m['loadavg_start'])} at the start, {_load(m.get('loadavg_end'))} at the end "
        "(other jobs share the CPU: compare rows of one run, not absolute values across runs).",
        "",
        "Versions: " + ", ".join(f"{k} {v}" for k, v in report["versions"].items()) + ".",
        "",
        "## Setup and compile (ms unless marked)",
        "",
        "cached: the same grammar compiled again; '-' where the cold compile took over 1 s (no "
        "cache: it would cost the cold time again).",
        "",
        "| library | vocab | tokenizer info (s) | tool: cold | first mask | cached | new matcher | "
        "any object: cold | first mask | cached | cache |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for lib, vocab, run in pairs:
        setup, tool, obj = run.get("setup", {}), run.get("compile_tool", {}), run.get("compile_object", {})
        lines.append(
            f"| {lib} | {vocab} | {_f(setup.get('tokenizer_info_s'), 1, 1)} | {_f(tool.get('cold_s'))} | "
            f"{_f(tool.get('first_mask_s'))} | {_f(tool.get('cached_s'), 1e3, 3)} | "
            f"{_f(tool.get('new_matcher_s'), 1e3, 3)} | {_f(obj.get('cold_s'))} | {_f(obj.get('first_mask_s'))} | "
            f"{_f(obj.get('cached_s'), 1e3, 3)} | {setup.get('cache', '-')} |")
    lines += [
        "",
        f"## Mask at batch {cfg['batch']} (tool schema), per decode step",
        "",
        f"Steady state: median / p90 wall ms per step over {cfg['steps']} steps after {cfg['warmup']} "
        "warm-up steps (their wall mean is the warm-up column); us/token = wall median / batch; CPU "
        "us/token = median CPU time per step / batch (row by row: this thread; batched: all threads). "
        "The libraries were stepped in turn in one process.",
        "",
        "| library | vocab | row by row: median ms | p90 ms | us/token | CPU us/token | "
        "batched: median ms | p90 ms | us/token | CPU us/token | warm-up ms row / batched | "
        "advance all ms | checks |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for lib, vocab, run in pairs:
        mask = run.get("mask")
        if not mask:
            lines.append(f"| {lib} | {vocab} | {run.get('mask_error', 'missing')} |" + " |" * 11)
            continue
        row, par, adv = mask["fill_row"], mask["fill_batch"] or {}, mask["advance"]
        checks = "ok" if not (mask["next_token_not_allowed"] or mask["advance_rejected"]
                              or mask["row_vs_batch_disagreements"]) else (
            f"{mask['next_token_not_allowed']} not allowed, {mask['advance_rejected']} rejected, "
            f"{mask['row_vs_batch_disagreements']} row/batch disagreements")
        lines.append(
            f"| {lib} | {vocab} | {_f(row['median_ms'], 1, 2)} | {_f(row['p90_ms'], 1, 2)} | "
            f"{_f(row['us_per_token'], 1, 1)} | {_f(row['cpu_us_per_token'], 1, 1)} | "
            f"{_f(par.get('median_ms'), 1, 2)} | {_f(par.get('p90_ms'), 1, 2)} | "
            f"{_f(par.get('us_per_token'), 1, 1)} | {_f(par.get('cpu_us_per_token'), 1, 1)} | "
            f"{_f(row['warmup_mean_ms'], 1, 1)} / {_f(par.get('warmup_mean_ms'), 1, 1)} | "
            f"{_f(adv['median_ms'], 1, 2)} | {checks} |")
    lines += [
        "",
        "## GIL: share of batched fill calls during which another Python thread ran",
        "",
        "1.0: the call releases the GIL (the engine thread can run Python, e.g. launch a forward "
        "pass, meanwhile); near 0: it holds the GIL for the whole call. One-row fills are too short "
        "for this probe: their column says what the binding does.",
        "",
        "| library | vocab | batched fill | one-row fill (binding) |",
        "| --- | --- | ---: | --- |",
    ]
    for lib, vocab, run in pairs:
        gil, setup = run.get("gil", {}), run.get("setup", {})
        lines.append(f"| {lib} | {vocab} | {_f(gil.get('fill_batch'), 1, 2)} | {setup.get('gil_note', '-')} |")
    lines += [
        "",
        f"## Applying a [{cfg['batch']}, V] bitmask to fp32 logits (ms)",
        "",
        "| library | vocab | helper first call | helper median | plain torch median | same result |",
        "| --- | --- | ---: | ---: | ---: | --- |",
    ]
    for lib, vocab, run in pairs:
        apply = run.get("apply", {})
        helper, plain = apply.get("library", {}), apply.get("plain_torch", {})
        lines.append(f"| {lib} | {vocab} | {helper.get('error') or _f(helper.get('first_ms'), 1, 1)} | "
                     f"{_f(helper.get('median_ms'), 1, 2)} | {_f(plain.get('median_ms'), 1, 2)} | "
                     f"{apply.get('matches_plain', '-')} |")
    lines += sanity_table(pairs)
    errors = [f"- {lib} {vocab}: {run['error']}" for lib, vocab, run in pairs if "error" in run]
    if errors:
        lines += ["", "## Errors", "", *errors]
    return "\n".join(lines) + "\n"


def sanity_table(pairs: list) -> list[str]:
    """Accepted/total tokens per case (EOS included), libraries side by side per vocabulary."""
    vocabs = sorted({vocab for _, vocab, _ in pairs}, key=lambda v: (v != "49k", v))
    libs = list(dict.fromkeys(lib for lib, _, _ in pairs))
    lines = ["", "## Sanity: tokens accepted / sequence length (EOS last)", ""]
    header = "| case | vocab | " + " | ".join(libs) + " | agree |"
    lines += [header, "| --- | --- | " + "--- | " * len(libs) + "--- |"]
    for case in sanity_texts():
        for vocab in vocabs:
            runs = {lib: run for lib, v, run in pairs if v == vocab}
            cells = [runs.get(lib, {}).get("sanity", {}).get(case, "-") for lib in libs]
            known = {c for c in cells if c != "-"}
            lines.append(f"| {case} | {vocab} | " + " | ".join(cells) + f" | {'yes' if len(known) == 1 else 'NO'} |")
    return lines


def _f(value: Any, scale: float = 1e3, digits: int = 1) -> str:
    return "-" if value is None else f"{value * scale:.{digits}f}"


def _load(loadavg: Any) -> str:
    return "-" if not loadavg else "/".join(f"{x:.1f}" for x in loadavg)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.studies.grammar.cost",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print JSON instead of Markdown")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--steps", type=int, default=96)
    parser.add_argument("--warmup", type=int, default=16)
    parser.add_argument("--threads", type=int, default=2, help="threads of the parallel fills")
    parser.add_argument("--vocab", default="49k,128k")
    parser.add_argument("--libraries", default="llguidance,xgrammar,outlines_core")
    parser.add_argument("--worker-timeout", type=float, default=300.0)
    parser.add_argument("--save", help="also write grammar_cost.md and grammar_cost.json into this folder")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.batch < 1 or args.steps < 1 or args.warmup < 1:
        parser.error("--batch, --steps and --warmup must be >= 1")
    cfg = Config(batch=args.batch, steps=args.steps, warmup=args.warmup, threads=args.threads)
    if args.worker:
        worker_main(args.worker, cfg)
        return
    report = run_all(args.libraries.split(","), args.vocab.split(","), cfg, args.worker_timeout)
    text = markdown(report)
    if args.save:
        folder = Path(args.save)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "grammar_cost.md").write_text(text, encoding="utf-8")
        (folder / "grammar_cost.json").write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(report, indent=1) if args.json else text)


if __name__ == "__main__":
    main()
