"""Greedy token parity with transformers while KV moves between the device and the host:
a live program's cached prefix is evicted to host blocks by other calls and fetched back for
its next call (or prefetched back before it comes), and swap preemption runs under memory
pressure with prefix caching on."""

from __future__ import annotations

import random

import pytest

from engine import EngineConfig, LLMEngine, SamplingParams
from engine_checks import assert_all_free, random_tokens
from agentix_testing.tiny_llama import hf_greedy

NUM_HOST_BLOCKS = 32


pytestmark = pytest.mark.usefixtures("one_torch_thread")


class StepClock:
    """The engine's clock: one second per step (`drain` advances it)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def make_engine(model_dir: str, **overrides) -> tuple[LLMEngine, StepClock]:
    config = dict(model=model_dir, block_size=4, num_kv_blocks=14,
                  num_host_blocks=NUM_HOST_BLOCKS, enable_prefix_caching=True, policy="atlas",
                  kv_memory="program", service_mode="tokens")
    clock = StepClock()
    return LLMEngine(EngineConfig.from_flat(**{**config, **overrides}), clock=clock), clock


def drain(engine: LLMEngine, clock: StepClock) -> None:
    while engine.has_unfinished_calls():
        engine.step()
        clock.now += 1.0
        engine.check_integrity()


def generate(engine: LLMEngine, clock: StepClock, program: str | None, prompt: list[int],
             max_tokens: int, **kwargs):
    call_id = engine.add_call(program, prompt, SamplingParams(max_tokens=max_tokens,
                                                              ignore_eos=True), **kwargs)
    drain(engine, clock)
    return engine.pop_completion(call_id)


def test_a_prefix_offloaded_to_host_is_fetched_back_token_exact(tiny_tied_llama):
    model_dir, model = tiny_tied_llama
    engine, clock = make_engine(model_dir)  # 13 usable blocks of 4 tokens
    rng = random.Random(0)
    engine.start_program("A")
    prompt_a = random_tokens(rng, 10)
    a1 = generate(engine, clock, "A", prompt_a, 6, expected_tool_seconds=60.0)
    assert a1.token_ids == hf_greedy(model, prompt_a, 6)
    # A's first 12 tokens are cached in 3 blocks; its 4 blocks are retained for its next call.
    assert engine.scheduler.stats()["retained_blocks"] == 3

    # A one-call program (nobody's KV once done) takes all 13 blocks: A's 3 go to host.
    prompt_b = random_tokens(rng, 48)
    b = generate(engine, clock, None, prompt_b, 4)
    assert b.token_ids == hf_greedy(model, prompt_b, 4)
    stats = engine.scheduler.stats()
    assert (stats["offloaded_blocks"], stats["fetched_blocks"]) == (3, 0)
    assert engine.kv.host_pool.num_cached == 3

    prompt_a2 = prompt_a + a1.token_ids + random_tokens(rng, 5)
    a2 = generate(engine, clock, "A", prompt_a2, 6)
    assert a2.num_cached_tokens == 12
    assert engine.scheduler.stats()["fetched_blocks"] == 3
    assert a2.token_ids == hf_greedy(model, prompt_a2, 6)
    swapper = engine.runner.swapper
    assert (swapper.num_blocks_out, swapper.num_blocks_in) == (3, 3)
    engine.end_program("A")
    assert_all_free(engine)


def test_a_prefix_prefetched_back_before_the_next_call_is_a_device_hit_token_exact(
        tiny_tied_llama):
    model_dir, model = tiny_tied_llama
    engine, clock = make_engine(model_dir, prefetch=True)
    rng = random.Random(0)
    engine.start_program("A")
    prompt_a = random_tokens(rng, 10)
    a1 = generate(engine, clock, "A", prompt_a, 6, expected_tool_seconds=3.0)
    generate(engine, clock, None, random_tokens(rng, 48), 4)  # A's 3 blocks go to host
    assert engine.scheduler.stats()["offloaded_blocks"] == 3
    while engine.scheduler.stats()["prefetched_blocks"] == 0:  # b's KV is nobody's: free
        assert clock.now < 60.0, "A's KV never came back"
        engine.step()
        clock.now += 1.0
        engine.check_integrity()
    assert engine.scheduler.stats()["prefetched_blocks"] == 3
    assert engine.kv.host_pool.num_cached == 0
    prompt_a2 = prompt_a + a1.token_ids + random_tokens(rng, 5)
    a2 = generate(engine, clock, "A", prompt_a2, 6)
    assert a2.num_cached_tokens == 12 and engine.scheduler.stats()["fetched_blocks"] == 0
    assert a2.token_ids == hf_greedy(model, prompt_a2, 6)
    swapper = engine.runner.swapper
    assert (swapper.num_blocks_out, swapper.num_blocks_in) == (3, 3)
    engine.end_program("A")
    assert_all_free(engine)


PROMPT_LENGTHS = [3, 7, 12, 17, 22, 29, 33, 40]
OUTPUT_LENGTHS = [9, 24, 5, 16, 20, 12, 7, 18]


def test_swap_preemption_under_memory_pressure_with_prefix_caching_is_token_exact(tiny_tied_llama):
    model_dir, model = tiny_tied_llama
    engine, clock = make_engine(model_dir, block_size=8, num_kv_blocks=12,
                                preemption_mode="swap")
    rng = random.Random(1)
    shared = random_tokens(rng, 16)  # two full blocks every prompt starts with
    prompts = [shared + random_tokens(rng, n) for n in PROMPT_LENGTHS]
    ids = []
    for i, (prompt, n) in enumerate(zip(prompts, OUTPUT_LENGTHS)):
        program = engine.start_program(f"p{i}")
        ids.append(engine.add_call(program, prompt, SamplingParams(max_tokens=n,
                                                                   ignore_eos=True)))
    drain(engine, clock)
    outputs = [engine.pop_completion(i) for i in ids]
    stats = engine.scheduler.stats()
    assert (stats["num_preemptions"], stats["preemptions_swap"], stats["num_swap_ins"]) == \
        (3, 3, 3)
    # The first three start together, before the shared prefix is cached.
    assert [o.num_cached_tokens for o in outputs] == [0, 0, 0, 16, 16, 16, 16, 16]
    assert [o.num_preemptions for o in outputs] == [0, 0, 0, 1, 1, 0, 1, 0]
    swapper = engine.runner.swapper  # swapped calls' blocks go out and in; offloads only out
    assert swapper.num_blocks_out - stats["offloaded_blocks"] == \
        swapper.num_blocks_in - stats["fetched_blocks"] == 18
    for prompt, n, out in zip(prompts, OUTPUT_LENGTHS, outputs):
        assert out.token_ids == hf_greedy(model, prompt, n)
    for i in range(len(prompts)):
        engine.end_program(f"p{i}")
    assert_all_free(engine)
