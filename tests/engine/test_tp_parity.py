"""Tensor parallelism on CPU (gloo): TP=2 gives exactly transformers' greedy tokens on tiny
Llamas with 2 and 4 KV heads and with 1 KV head replicated on both ranks, under batching,
chunked prefill, prefix caching, swap preemption and multistep decoding."""

from __future__ import annotations

import pytest

from agentix_testing.tiny_llama import GreedyReference, build_tiny_llama
from engine import LLM
from test_parity import make_prompts, params, reference

KV_HEADS = {"kv2": 2, "kv4": 4, "kv1-replicated": 1}


@pytest.fixture(scope="module", params=list(KV_HEADS))
def tp_model(request, tmp_path_factory):
    """(model_dir, transformers' greedy answers): 4 query heads, the parameter's KV heads; the
    kv2 model is untied, the others tied."""
    path = tmp_path_factory.mktemp(f"tp-{request.param}")
    model = build_tiny_llama(path, tie_word_embeddings=request.param != "kv2",
                             num_key_value_heads=KV_HEADS[request.param])
    return str(path), GreedyReference(model)


def generate_tp2(model_dir, prompts, **overrides):
    llm = LLM(model_dir, block_size=8, tensor_parallel_size=2, **overrides)
    try:
        got = [o.token_ids for o in llm.generate(prompts, params())]
        llm.engine.check_integrity()
        assert llm.engine.kv.num_free_blocks == llm.engine.kv.pool.num_usable
        return llm, got
    finally:
        llm.close()


def test_batch_of_eight(tp_model):
    model_dir, greedy = tp_model
    prompts = make_prompts()
    _, got = generate_tp2(model_dir, prompts, num_kv_blocks=80)
    assert got == reference(greedy, prompts)


@pytest.fixture(scope="module")
def kv2_model(tmp_path_factory):
    path = tmp_path_factory.mktemp("tp-modes")
    return str(path), GreedyReference(build_tiny_llama(path, tie_word_embeddings=False))


@pytest.mark.parametrize("mode, overrides", [
    ("chunked prefill", dict(num_kv_blocks=80, max_num_batched_tokens=10)),
    ("swap preemption", dict(num_kv_blocks=12, preemption_mode="swap", num_host_blocks=40)),
    ("multistep", dict(num_kv_blocks=80, multistep=4)),
])
def test_engine_modes(kv2_model, mode, overrides):
    model_dir, greedy = kv2_model
    prompts = make_prompts()
    llm, got = generate_tp2(model_dir, prompts, **overrides)
    assert got == reference(greedy, prompts)
    if mode == "swap preemption":
        scheduler = llm.engine.scheduler
        assert scheduler.num_swap_outs > 0 and scheduler.num_swap_ins == scheduler.num_swap_outs
        assert llm.engine.kv.num_free_host_blocks == 40


def test_prefix_caching(kv2_model):
    model_dir, greedy = kv2_model
    prompts = make_prompts(seed=1, shared_prefix=20)
    llm = LLM(model_dir, block_size=8, num_kv_blocks=80, enable_prefix_caching=True,
              tensor_parallel_size=2)
    try:
        first = llm.generate(prompts[:1], params()[:1])
        rest = llm.generate(prompts[1:], params()[1:])
        llm.engine.check_integrity()
    finally:
        llm.close()
    assert [o.num_cached_tokens for o in rest] == [16] * 7
    assert [o.token_ids for o in first + rest] == reference(greedy, prompts)
