"""What streaming detokenization costs the engine thread: `python -m bench.studies.detok_cost
[--batch 64] [--steps 32] [--threads 1]`.

SmolLM2 on this CPU decodes `--batch` calls for `--steps` steps (ignore_eos); after each step
every output's new tokens go through `server.detok.IncrementalText.push`, as the server's
engine thread does for each streamed call, with no stop strings and with 16 of them of 32
characters (each stream then holds back a possible stop prefix). Prints the detokenization
time as a share of the step time, over the decode steps (the prefill step left out).
"""

from __future__ import annotations

import argparse
import time

STOPS = tuple(f"<|stop marker {i:02d} that never comes|>"[:32] for i in range(16))


def measure(batch: int, steps: int, threads: int) -> dict[str, float]:
    import torch

    from bench.sim.baselines import PLAIN
    from engine import LLM, SamplingParams
    from engine.models.smollm2 import ensure_smollm2_dir
    from server.detok import IncrementalText

    torch.set_num_threads(threads)
    llm = LLM(str(ensure_smollm2_dir()), **PLAIN, max_num_seqs=batch, block_size=16,
              num_kv_blocks=batch * 8 + 8)
    engine, tokenizer = llm.engine, llm.engine.tokenizer
    prompt = tokenizer.encode("Write a short story about a lighthouse keeper and a storm.")
    ids = [engine.add_call(None, prompt, SamplingParams(max_tokens=steps + 1, ignore_eos=True))
           for _ in range(batch)]
    texts = {stops: {i: IncrementalText(tokenizer.decode, stops) for i in ids}
             for stops in ((), STOPS)}
    step_seconds = {(): 0.0, STOPS: 0.0}
    engine.step()  # the prefill
    decode_seconds = 0.0
    for _ in range(steps):
        started = time.perf_counter()
        outputs = engine.step()
        decode_seconds += time.perf_counter() - started
        for stops, streams in texts.items():
            started = time.perf_counter()
            for out in outputs:
                streams[out.call_id].push(out.new_token_ids)
            step_seconds[stops] += time.perf_counter() - started
    while engine.has_unfinished_calls():
        engine.step()
    return {"step_seconds": decode_seconds / steps,
            "detok_seconds": step_seconds[()] / steps,
            "detok_seconds_16_stops": step_seconds[STOPS] / steps}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.studies.detok_cost",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    m = measure(args.batch, args.steps, args.threads)
    step = m["step_seconds"]
    print(f"batch {args.batch}, {args.steps} decode steps, {args.threads} torch thread(s): "
          f"step {step * 1e3:.1f} ms; detokenization {m['detok_seconds'] * 1e3:.2f} ms "
          f"({m['detok_seconds'] / step:.2%} of a step), with 16 stop strings "
          f"{m['detok_seconds_16_stops'] * 1e3:.2f} ms ({m['detok_seconds_16_stops'] / step:.2%})")


if __name__ == "__main__":
    main()
