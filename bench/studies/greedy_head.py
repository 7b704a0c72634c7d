"""The LM head of greedy steps: the full fp32 logits and their argmax against the greedy screen
(`engine.models.greedy_screen`), on the hidden rows of real decode steps.

    python -m bench.studies.greedy_head [--num 64] [--tokens 80] [--min-rows 32] [--steps 40]
                                        [--rounds 5]

Generates the ShareGPT requests of `bench.studies.vs_vllm` (seed 0) with SmolLM2-135M-Instruct
(fp32, greedy, EOS ignored, at most `--tokens` tokens each) and keeps the sampled hidden rows
of the first `--steps` steps that sample at least `--min-rows` rows. Then, `--rounds` times,
it runs each kept step both ways, alternating which goes first, checks that both give the
same tokens, and prints each way's median time and their ratio. The full way is the
engine's own: `model.logits`, then the sampler. SystemExit where the engine has no screen
(no native bf16 on this CPU, or no native library).
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


if __name__ == "__main__":
    main()
