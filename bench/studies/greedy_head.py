"""The LM head of greedy steps: the full fp32 logits and their argmax against the greedy screen
(`engine.models.greedy_screen`), on the hidden rows of real decode steps.

    python -m bench.studies.greedy_head [--num 64] [--tokens 80] [--min-rows 32] [--steps 40]
                                        [--rounds 5]

Generates the ShareGPT requests of `bench.studies.vs_vllm` (seed 0) with SmolLM2-135M-Instruct
(fp32, greedy, EOS ignored, at most `--tokens` tokens each) and keeps the sampled hidden rows
of the first `--steps` steps that sample at least `--min-rows` rows. Then, `--rounds` times,
it runs each kept step both ways, alternating which goes first, checks that both give the
same tokens, and prints each way's median time and their ratio. The full way is the
engine's own: `model.logits`, then the sampler.

Then the whole steps: the same requests generated again, to their full output lengths, with
the screen on for even steps and off for odd ones (`AlternatingScreen`). It prints the median
time of the decode-only steps of at least `--min-rows` rows each way (the first such step,
a warm-up, left out), and the median ratio of adjacent pairs. SystemExit where the engine
has no screen (no native bf16 on this CPU, or no native library).
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Callable, Sequence

import torch


class _Recorder:
    """Stands in for the runner's screen: keeps the rows of steps of at least `min_rows`
    rows (up to `steps` of them) and hands every call on to the screen."""

    def __init__(self, screen, min_rows: int, steps: int) -> None:
        self.screen, self.min_rows, self.steps = screen, min_rows, steps
        self.kept: list[torch.Tensor] = []

    def tokens(self, hidden: torch.Tensor) -> list[int] | None:
        if hidden.shape[0] >= self.min_rows and len(self.kept) < self.steps:
            self.kept.append(hidden.clone())
        return self.screen.tokens(hidden)


class AlternatingScreen:
    """An executor around `runner`: its greedy screen on for even steps and off for odd ones;
    keeps the wall time of each decode-only step of at least `min_rows` rows by whether the
    screen was on (`seconds[True]`, `seconds[False]`), the first such step (a warm-up) left
    out."""

    def __init__(self, runner, min_rows: int) -> None:
        self.runner, self.screen, self.min_rows = runner, runner.greedy_screen, min_rows
        self.seconds: dict[bool, list[float]] = {True: [], False: []}
        self.num_steps = 0
        self._warm = False

    def execute(self, plan):
        screen_on = self.num_steps % 2 == 0
        self.num_steps += 1
        self.runner.greedy_screen = self.screen if screen_on else None
        start = time.perf_counter()
        result = self.runner.execute(plan)
        seconds = time.perf_counter() - start
        self.runner.greedy_screen = self.screen
        chunks = plan.chunks
        if len(chunks) >= self.min_rows and all(c.is_decode for c in chunks):
            if self._warm:
                self.seconds[screen_on].append(seconds)
            self._warm = True
        return result


def time_alternately(ways: dict[str, Callable[[torch.Tensor], list[int]]],
                     kept: Sequence[torch.Tensor], rounds: int) -> dict[str, list[float]]:
    """Seconds of each way on each kept step, `rounds` times, the first way alternating; raises
    AssertionError where two ways give different tokens."""
    seconds: dict[str, list[float]] = {name: [] for name in ways}
    names = list(ways)
    for round_ in range(rounds):
        order = names if round_ % 2 == 0 else names[::-1]
        for hidden in kept:
            tokens = []
            for name in order:
                start = time.perf_counter()
                tokens.append(ways[name](hidden))
                seconds[name].append(time.perf_counter() - start)
            assert all(t == tokens[0] for t in tokens), "the ways disagree on a step's tokens"
    return seconds


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num", type=int, default=64, help="requests")
    parser.add_argument("--tokens", type=int, default=80, help="most tokens per request")
    parser.add_argument("--min-rows", type=int, default=32)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    for name in ("num", "tokens", "min_rows", "steps", "rounds"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    from transformers import AutoTokenizer

    from bench.sim.sharegpt import sample_requests
    from engine import LLM, SamplingParams
    from engine.models.smollm2 import ensure_smollm2_dir

    model_dir = str(ensure_smollm2_dir())
    requests = sample_requests(AutoTokenizer.from_pretrained(model_dir), args.num, 0, 512, 256)
    llm = LLM(model_dir, enable_prefix_caching=False, max_num_seqs=args.num,
              kv_cache_memory_gb=2.0)
    runner = llm.engine.runner
    if runner.greedy_screen is None:
        raise SystemExit("greedy_head: this engine has no greedy screen (it needs a CPU with "
                         "native bf16 and the native library)")
    recorder = _Recorder(runner.greedy_screen, args.min_rows, args.steps)
    runner.greedy_screen = recorder
    llm.generate([list(prompt) for prompt, _ in requests],
                 [SamplingParams(max_tokens=min(n, args.tokens), ignore_eos=True)
                  for _, n in requests])
    if not recorder.kept:
        raise SystemExit(f"greedy_head: no step sampled {args.min_rows} rows or more")
    model, sampler, screen = runner.model, runner.sampler, recorder.screen
    greedy = SamplingParams()
    ways = {"full logits": lambda h: sampler(model.logits(h), [greedy] * h.shape[0],
                                             [0] * h.shape[0]),
            "greedy screen": screen.tokens}
    with torch.inference_mode():
        seconds = time_alternately(ways, recorder.kept, args.rounds)
    rows = sorted(h.shape[0] for h in recorder.kept)
    print(f"{len(rows)} steps of {rows[0]}-{rows[-1]} rows, {args.rounds} rounds, "
          f"{torch.get_num_threads()} threads; tokens identical on every step")
    medians = {name: statistics.median(s) * 1e3 for name, s in seconds.items()}
    for name, ms in medians.items():
        print(f"{name}: median {ms:.2f} ms")
    print(f"full / screen: {medians['full logits'] / medians['greedy screen']:.2f}x")
    runner.greedy_screen = screen
    alternating = AlternatingScreen(runner, args.min_rows)
    llm.engine.executor = alternating
    llm.generate([list(prompt) for prompt, _ in requests],
                 [SamplingParams(max_tokens=n, ignore_eos=True) for _, n in requests])
    on, off = alternating.seconds[True], alternating.seconds[False]
    if not on or not off:
        raise SystemExit(f"greedy_head: too few decode steps of {args.min_rows} rows or more")
    pairs = statistics.median(b / a for a, b in zip(on, off))
    print(f"whole decode steps of {args.min_rows}+ rows, screen on and off on alternate steps "
          f"({len(on)} and {len(off)}): median {statistics.median(on) * 1e3:.1f} ms with the "
          f"screen, {statistics.median(off) * 1e3:.1f} ms without; adjacent pairs "
          f"without / with: median {pairs:.3f}x")


if __name__ == "__main__":
    main()
