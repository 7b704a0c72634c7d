"""Greedy token parity with transformers' LlamaForCausalLM.generate under every scheduling
situation the engine handles: batching, late arrivals, chunked prefill, prefix caching,
preemption (recompute and swap) and multistep decoding."""

from __future__ import annotations

import random

import pytest

from agentix_testing.tiny_llama import GreedyReference
from engine import LLM, SamplingParams

PROMPT_LENGTHS = [3, 7, 12, 17, 22, 29, 33, 40]
OUTPUT_LENGTHS = [9, 24, 5, 16, 20, 12, 7, 18]


def make_prompts(seed: int = 0, shared_prefix: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    prefix = [rng.randrange(3, 384) for _ in range(shared_prefix)]
    return [prefix + [rng.randrange(3, 384) for _ in range(n)] for n in PROMPT_LENGTHS]


def params() -> list[SamplingParams]:
    return [SamplingParams(max_tokens=n, ignore_eos=True) for n in OUTPUT_LENGTHS]


def reference(greedy: GreedyReference, prompts) -> list[list[int]]:
    return [greedy(p, n) for p, n in zip(prompts, OUTPUT_LENGTHS)]


def run_engine(model_dir, prompts, **overrides):
    llm = LLM(model_dir, block_size=8, **overrides)
    outputs = llm.generate(prompts, params())
    llm.engine.check_integrity()
    assert llm.engine.kv.num_free_blocks == llm.engine.kv.pool.num_usable
    return llm, [o.token_ids for o in outputs]


def test_batch_of_eight(tiny_llama, tiny_llama_greedy):
    model_dir, _ = tiny_llama
    prompts = make_prompts()
    _, got = run_engine(model_dir, prompts, num_kv_blocks=80)
    assert got == reference(tiny_llama_greedy, prompts)


def test_calls_arriving_while_others_decode(tiny_llama, tiny_llama_greedy):
    model_dir, _ = tiny_llama
    prompts = make_prompts()
    llm = LLM(model_dir, block_size=8, num_kv_blocks=80)
    engine = llm.engine
    ids, decoded_while_adding = [], []
    for prompt, p in zip(prompts, params()):
        ids.append(engine.add_call(None, prompt, p))
        for _ in range(3):
            out = engine.step()
            decoded_while_adding.extend(o for o in out if len(o.new_token_ids) == 1)
    while engine.has_unfinished_calls():
        engine.step()
    assert decoded_while_adding, "no call decoded while others arrived"
    assert [engine.pop_completion(i).token_ids for i in ids] == reference(tiny_llama_greedy, prompts)
    engine.check_integrity()


def test_chunked_prefill_small_budget(tiny_llama, tiny_llama_greedy):
    model_dir, _ = tiny_llama
    prompts = make_prompts()
    _, got = run_engine(model_dir, prompts, num_kv_blocks=80, max_num_batched_tokens=10)
    assert got == reference(tiny_llama_greedy, prompts)


def test_prefix_caching_shared_prefixes(tiny_llama, tiny_llama_greedy):
    model_dir, _ = tiny_llama
    prompts = make_prompts(seed=1, shared_prefix=20)
    llm = LLM(model_dir, block_size=8, num_kv_blocks=80, enable_prefix_caching=True)
    first = llm.generate(prompts[:1], params()[:1])
    rest = llm.generate(prompts[1:], params()[1:])
    outputs = first + rest
    llm.engine.check_integrity()
    # The 20-token shared prefix spans two full 8-token blocks.
    assert [o.num_cached_tokens for o in rest] == [16] * 7
    assert [o.token_ids for o in outputs] == reference(tiny_llama_greedy, prompts)


class RecordingExecutor:
    """Passes plans to the real runner and keeps them, to count swap batches."""

    def __init__(self, runner):
        self.runner, self.plans = runner, []

    def execute(self, plan):
        self.plans.append(plan)
        return self.runner.execute(plan)


@pytest.mark.parametrize("mode", ["recompute", "swap", "keep"])
def test_preemption_under_a_tiny_pool(tiny_llama, tiny_llama_greedy, mode):
    model_dir, _ = tiny_llama
    prompts = make_prompts()
    llm = LLM(model_dir, block_size=8, num_kv_blocks=12, preemption_mode=mode,
              num_host_blocks=40 if mode == "swap" else 0,
              enable_prefix_caching=mode == "keep")
    engine = llm.engine
    recorder = engine.executor = RecordingExecutor(engine.runner)
    got = [o.token_ids for o in llm.generate(prompts, params())]
    engine.check_integrity()
    assert engine.kv.num_free_blocks == engine.kv.pool.num_usable
    assert engine.scheduler.num_preemptions > 0
    if mode == "swap":
        swapper = engine.runner.swapper
        assert engine.scheduler.num_swap_outs > 0
        assert engine.scheduler.num_swap_ins == engine.scheduler.num_swap_outs
        batches = sum(bool(p.swap_out) for p in recorder.plans) + \
            sum(bool(p.swap_in) for p in recorder.plans)
        assert swapper.num_copies == batches
        assert swapper.num_blocks_out == swapper.num_blocks_in > 0
        assert engine.kv.num_free_host_blocks == 40
    if mode == "keep":  # preempted calls' KV stayed cached and was found again
        assert engine.scheduler.stats()["preemptions_keep"] > 0
    assert got == reference(tiny_llama_greedy, prompts)


def test_multistep_four(tiny_llama, tiny_llama_greedy):
    model_dir, _ = tiny_llama
    prompts = make_prompts()
    llm = LLM(model_dir, block_size=8, num_kv_blocks=80, multistep=4)
    recorder = llm.engine.executor = RecordingExecutor(llm.engine.runner)
    got = [o.token_ids for o in llm.generate(prompts, params())]
    llm.engine.check_integrity()
    continued = sum(p.is_continuation for p in recorder.plans)
    assert continued > len(recorder.plans) // 2
    assert llm.engine.scheduler.num_rounds == len(recorder.plans) - continued
    assert got == reference(tiny_llama_greedy, prompts)
