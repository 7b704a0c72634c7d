"""Step `parity-*`: greedy tokens of the engine against transformers on the device, under each
engine mode (batching, chunked prefill, prefix caching, swap preemption, multistep).

A run (model x mode) is `exact` when every prompt's tokens equal transformers'; `near-tie`
when each differing prompt first differs where transformers' logits for its own token and for
the engine's are within the tie margin of each other (reduced precision can flip such ties);
otherwise `DIVERGED`. A mode that did not happen (no cached tokens, no swap-outs) is
`NOT EXERCISED`. The step is ok when every run is exact or a near-tie.
"""

from __future__ import annotations

import argparse
import tempfile
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from bench.studies.gpu_check import smollm2
from bench.studies.gpu_check.parity_cases import (Case, hf_greedy, hf_margin, smollm2_case,
                                                  tiny_cases)
from bench.studies.gpu_check.step import (Outcome, Step, add_device_argument, markdown_table,
                                          release_device_memory, require)

DEFAULT_DTYPE = {"tiny": "float32", "smollm2": "bfloat16"}
TIE_MARGIN = {"float32": 1e-3, "float16": 0.25, "bfloat16": 0.5}  # logits
PASSING = ("exact", "near-tie")
MODE_NAMES = ("batching", "chunked-prefill", "prefix-caching", "swap-preemption", "multistep")


@dataclass(frozen=True)
class Mode:
    """Engine overrides for one situation; `needs` names the figure of `run_engine` that must
    be positive for the situation to have happened; `warm_first` generates prompt 0 alone
    before the others, so they can hit its cached prefix."""

    overrides: dict = field(default_factory=dict)
    needs: str | None = None
    warm_first: bool = False


def modes(case: Case) -> dict[str, Mode]:
    """MODE_NAMES -> Mode, sized for `case`."""
    blocks = case.blocks()
    return dict(zip(MODE_NAMES, (
        Mode(),
        Mode({"max_num_batched_tokens": 10}),
        Mode({"enable_prefix_caching": True}, "cached tokens", warm_first=True),
        # room for the longest sequence, not for the batch: preemption by swap
        Mode({"num_kv_blocks": max(blocks) + 4, "preemption_mode": "swap",
              "num_host_blocks": sum(blocks)}, "swap-outs"),
        Mode({"multistep": 4}),
    )))


def mode_list(text: str) -> list[str]:
    names = text.split(",")
    unknown = [n for n in names if n not in MODE_NAMES]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown mode(s) {unknown}; choose from {MODE_NAMES}")
    return names


def run_engine(case: Case, mode: Mode, device: str) -> tuple[list[list[int]], dict[str, int]]:
    """The engine's tokens for every prompt of `case`, and its figures, under `mode`."""
    from bench.sim.baselines import PLAIN
    from engine import LLM, SamplingParams

    config = {**PLAIN, "dtype": case.dtype, "device": device, "block_size": case.block_size,
              "num_kv_blocks": sum(case.blocks()) + 8, **mode.overrides}
    llm = LLM(case.model_dir, **config)
    params = [SamplingParams(max_tokens=n, ignore_eos=case.ignore_eos) for n in case.max_tokens]
    first = llm.generate(case.prompts[:1], params[:1]) if mode.warm_first else []
    outputs = first + llm.generate(case.prompts[len(first):], params[len(first):])
    llm.engine.check_integrity()
    scheduler = llm.engine.scheduler
    figures = {"cached tokens": sum(o.num_cached_tokens for o in outputs),
               "preemptions": scheduler.num_preemptions, "swap-outs": scheduler.num_swap_outs}
    return [o.token_ids for o in outputs], figures


def first_divergence(got: list[int], ref: list[int]) -> int | None:
    """Index of the first differing token (the shorter length if one is a prefix); None if equal."""
    if got == ref:
        return None
    return next((i for i, (a, b) in enumerate(zip(got, ref)) if a != b), min(len(got), len(ref)))


def compare(case: Case, mode: Mode, got: list[list[int]], refs: list[list[int]],
            figures: dict[str, int], tie_margin: float) -> dict:
    """One run's row: status, exact prompts, tokens matching before divergence, divergences."""
    divergences = []
    for i, (g, r) in enumerate(zip(got, refs)):
        at = first_divergence(g, r)
        if at is not None:
            divergences.append({"prompt": i, "token": at, "margin": hf_margin(case, i, r, g, at),
                                "engine": g, "transformers": r})
    margins = [d["margin"] for d in divergences]
    if mode.needs and figures[mode.needs] == 0:
        status = f"NOT EXERCISED (0 {mode.needs})"
    elif not divergences:
        status = "exact"
    elif all(m is not None and abs(m) <= tie_margin for m in margins):
        status = "near-tie"
    else:
        status = "DIVERGED"
    first_div = {d["prompt"]: d["token"] for d in divergences}
    return {"status": status, "prompts": len(refs), "exact": len(refs) - len(divergences),
            "matched": sum(first_div.get(i, len(r)) for i, r in enumerate(refs)),
            "tokens": sum(map(len, refs)), "figures": figures, "divergences": divergences}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", choices=sorted(DEFAULT_DTYPE), required=True)
    add_device_argument(parser)
    parser.add_argument("--dtype", choices=sorted(TIE_MARGIN), help="default: float32 for tiny, "
                        "bfloat16 for smollm2")
    parser.add_argument("--tie-margin", type=float, help="default by dtype: " + ", ".join(
        f"{k} {v}" for k, v in TIE_MARGIN.items()))
    parser.add_argument("--modes", type=mode_list, default=list(MODE_NAMES),
                        help="comma-separated subset of: " + ", ".join(MODE_NAMES))


def resolve(args: argparse.Namespace) -> str:
    require("engine:LLM", "engine:SamplingParams", "transformers:AutoModelForCausalLM")
    if args.model == "tiny":
        require("agentix_testing.tiny_llama:build_tiny_llama",
                "agentix_testing.tiny_llama:TINY_LLAMA")
        return "engine, transformers, agentix_testing/tiny_llama.py import"
    require("engine.tokenizer:Tokenizer")
    return f"engine, transformers import; {smollm2.locate()}"


def run(args: argparse.Namespace) -> Outcome:
    dtype = args.dtype or DEFAULT_DTYPE[args.model]
    tie_margin = TIE_MARGIN[dtype] if args.tie_margin is None else args.tie_margin
    with tempfile.TemporaryDirectory(prefix="gpu-check-parity-") as tmp:
        cases = (tiny_cases(Path(tmp), args.device, dtype) if args.model == "tiny"
                 else [smollm2_case(args.device, dtype)])
        rows = [row for case in cases for row in run_case(case, args, tie_margin)]
    passing = [r for r in rows if r["status"] in PASSING]
    matched, tokens = sum(r.get("matched", 0) for r in rows), sum(r.get("tokens", 0) for r in rows)
    summary = (f"{len(passing)}/{len(rows)} runs pass ({dtype}, {args.device}): "
               f"{sum(r['status'] == 'exact' for r in rows)} exact, "
               f"{sum(r['status'] == 'near-tie' for r in rows)} near-tie (margin <= {tie_margin}); "
               f"tokens matching {100 * matched / max(tokens, 1):.1f}%")
    failing = [f"{r['case']}/{r['mode']}: {r['status']}" for r in rows if r not in passing]
    if failing:
        summary += "; " + "; ".join(failing)
    return Outcome("ok" if len(passing) == len(rows) else "FAIL", summary,
                   {"dtype": dtype, "tie_margin": tie_margin, "runs": rows}, report(rows))


def run_case(case: Case, args: argparse.Namespace, tie_margin: float) -> list[dict]:
    refs = [hf_greedy(case, i) for i in range(len(case.prompts))]
    chosen = modes(case)
    rows = []
    for name in args.modes:
        row = {"case": case.name, "mode": name}
        try:
            got, figures = run_engine(case, chosen[name], args.device)
            row.update(compare(case, chosen[name], got, refs, figures, tie_margin))
        except Exception as exc:  # noqa: BLE001 - one broken mode must not hide the others
            traceback.print_exc()
            first_line = (str(exc).splitlines() or [""])[0].replace("|", "/")
            row["status"] = f"ERROR: {type(exc).__name__}: {first_line}"
        release_device_memory()
        print(f"{case.name}/{name}: {row['status']}", flush=True)
        rows.append(row)
    return rows


def report(rows: list[dict]) -> str:
    cells = []
    for r in rows:
        if "prompts" not in r:
            cells.append((r["case"], r["mode"], r["status"], "", "", "", "", ""))
            continue
        divs = r["divergences"]
        where = f"{divs[0]['prompt']}, {divs[0]['token']}" if divs else ""
        margins = [d["margin"] for d in divs]
        largest = ("" if not divs else "(length)" if None in margins
                   else f"{max(map(abs, margins)):.3g}")
        f = r["figures"]
        cells.append((r["case"], r["mode"], r["status"], f"{r['exact']}/{r['prompts']}",
                      f"{r['matched']}/{r['tokens']}", where, largest,
                      f"{f['cached tokens']} / {f['preemptions']} / {f['swap-outs']}"))
    return markdown_table(("model", "mode", "status", "exact prompts", "tokens matching",
                           "first divergence (prompt, token)", "largest margin",
                           "cached / preemptions / swap-outs"), cells)


STEP = Step(__doc__, add_arguments, resolve, run)

if __name__ == "__main__":
    raise SystemExit(STEP.main())
