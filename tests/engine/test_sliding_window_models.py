"""Sliding-window attention gives exactly transformers' greedy tokens: Mistral v0.1's window on
every layer, and Qwen2's on the layers its config names (here layer 1 of 2, so one step mixes
windowed and full layers). The windows (5 and 6 tokens) are shorter than every prompt but the
first, so every call attends past them.

test_parity's tests (batching, late arrivals, chunked prefill, prefix caching, preemption by
recompute and swap, multistep) run here unchanged on these models, as in test_model_families.
"""

from __future__ import annotations

import random

import pytest

from engine_checks import assert_all_free, random_tokens
from agentix_testing.tiny_llama import GreedyReference, build_tiny_llama, hf_greedy
from engine import LLM, SamplingParams
from test_host_tier_parity import generate, make_engine
from engine_mode_tests import *  # noqa: F401,F403  (collected here, on this module's fixtures)
from test_parity import make_prompts, reference
from test_tp_parity import generate_tp2

pytestmark = pytest.mark.usefixtures("one_torch_thread")

WINDOWED = {
    "mistral-window-6": dict(family="Mistral", tie_word_embeddings=False, sliding_window=6),
    "qwen2-window-5-layer-1": dict(family="Qwen2", tie_word_embeddings=True,
                                   use_sliding_window=True, sliding_window=5,
                                   max_window_layers=1),
}


def build_windowed(path, name: str):
    """Write the tiny model WINDOWED[name] to `path`; returns the transformers model."""
    return build_tiny_llama(path, vector_noise=0.3,
                            rope_parameters=dict(rope_type="default", rope_theta=1e6),
                            **WINDOWED[name])


@pytest.fixture(scope="module", params=list(WINDOWED))
def tiny_llama(request, tmp_path_factory):
    """(model_dir, transformers model) of the parameter's model (test_parity's name)."""
    path = tmp_path_factory.mktemp(request.param)
    return str(path), build_windowed(path, request.param)



def test_the_configs_windows_reach_the_layers(tiny_llama):
    llm = LLM(tiny_llama[0], num_kv_blocks=16, block_size=8)
    try:
        windows = [layer.self_attn.window for layer in llm.engine.executor.model.model.layers]
    finally:
        llm.close()
    assert windows in ([6, 6], [0, 5])


@pytest.mark.parametrize("name", list(WINDOWED))
def test_a_window_changes_the_tokens(tmp_path, name):
    """The reference really is windowed: the same weights without the window answer otherwise
    in transformers (so the parity tests above could not pass by ignoring it)."""
    prompt = make_prompts()[-1]
    windowed = GreedyReference(build_windowed(tmp_path / "windowed", name))(prompt, 18)
    unwindowed = {k: v for k, v in WINDOWED[name].items()
                  if k not in ("sliding_window", "use_sliding_window", "max_window_layers")}
    full = GreedyReference(build_tiny_llama(
        tmp_path / "full", vector_noise=0.3,
        rope_parameters=dict(rope_type="default", rope_theta=1e6),
        **unwindowed, **({"sliding_window": None} if name.startswith("mistral") else {})))
    assert windowed != full(prompt, 18)


def test_tensor_parallel_two_ranks_with_a_window(tmp_path):
    greedy = GreedyReference(build_windowed(tmp_path, "qwen2-window-5-layer-1"))
    prompts = make_prompts()
    _, got = generate_tp2(str(tmp_path), prompts, num_kv_blocks=80)
    assert got == reference(greedy, prompts)


def test_calls_longer_than_the_pool_run_by_dropping_blocks_behind_the_window(tmp_path):
    """Mistral's 6-token window over blocks of 4 in a pool of 11 usable blocks (44 tokens):
    two calls of 100 tokens each finish token-exact, because each holds only the blocks its
    window and its next chunk need (without the window the engine caps calls at 44 tokens)."""
    greedy = GreedyReference(build_windowed(tmp_path, "mistral-window-6"))
    prompts = [make_prompts(seed=3)[-1], make_prompts(seed=4)[-1]]  # 40 tokens each
    llm = LLM(str(tmp_path), block_size=4, num_kv_blocks=12, max_num_batched_tokens=16)
    try:
        assert llm.engine.max_model_len == 256  # the model's, not the pool's 44
        got = [o.token_ids for o in llm.generate(
            prompts, [SamplingParams(max_tokens=60, ignore_eos=True)] * 2)]
        llm.engine.check_integrity()
        assert llm.engine.kv.num_free_blocks == llm.engine.kv.pool.num_usable
    finally:
        llm.close()
    assert got == [greedy(p, 60) for p in prompts]


def test_a_program_through_the_host_tier_with_a_window_is_token_exact(tmp_path):
    """A windowed program's KV is retained, evicted to host by a long one-call program and
    looked up again by its next call (whose history the window has partly dropped): every
    call gives transformers' tokens and nothing leaks."""
    model = build_windowed(tmp_path, "mistral-window-6")
    engine, clock = make_engine(str(tmp_path))
    rng = random.Random(1)
    engine.start_program("A")
    prompt = random_tokens(rng, 10)
    first = generate(engine, clock, "A", prompt, 6, expected_tool_seconds=60.0)
    assert first.token_ids == hf_greedy(model, prompt, 6)
    flood = random_tokens(rng, 48)
    assert generate(engine, clock, None, flood, 4).token_ids == hf_greedy(model, flood, 4)
    again = prompt + first.token_ids + random_tokens(rng, 5)
    assert generate(engine, clock, "A", again, 6).token_ids == hf_greedy(model, again, 6)
    engine.end_program("A")
    assert_all_free(engine)
