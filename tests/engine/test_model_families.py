"""Qwen2, Qwen3 (dense) and Mistral give exactly transformers' greedy tokens, and configs the engine
cannot run fail before loading, in one line.

test_parity's tests (batching, late arrivals, chunked prefill, prefix caching, preemption by
recompute, swap and keep, multistep) and test_host_tier_parity's (a prefix through the host
tier, swap under pressure with prefix caching) run here unchanged on each family: they are
imported, so pytest collects them in this module, where `tiny_llama` and `tiny_llama_greedy`
are overridden by the families' models. The tiny models have random biases and norm weights
(`vector_noise`), RoPE theta 1e6; Qwen2 is tied with one KV head, Qwen3 untied with head_dim 24
!= hidden / heads, Mistral without a sliding window (v0.2 on; windows:
test_sliding_window_models)."""

from __future__ import annotations

import json

import pytest

from agentix_testing.tiny_llama import TINY_LLAMA, GreedyReference, build_tiny_llama
from engine import LLM
from engine_mode_tests import *  # noqa: F401,F403  (collected here, on this module's fixtures)
from test_parity import make_prompts, reference
from test_host_tier_parity import (  # noqa: F401  (collected here, on this module's fixtures)
    test_a_prefix_offloaded_to_host_is_fetched_back_token_exact as test_host_tier_fetch,
    test_swap_preemption_under_memory_pressure_with_prefix_caching_is_token_exact as test_host_swap,
)
from test_tp_parity import generate_tp2

pytestmark = pytest.mark.usefixtures("one_torch_thread")

FAMILIES = {
    "qwen2": dict(family="Qwen2", tie_word_embeddings=True, num_key_value_heads=1),
    "qwen3": dict(family="Qwen3", tie_word_embeddings=False, head_dim=24),
    "qwen3-attention-bias": dict(family="Qwen3", tie_word_embeddings=True, head_dim=24,
                                 attention_bias=True),
    "mistral": dict(family="Mistral", tie_word_embeddings=False, sliding_window=None),
}


def build_family(path, name: str):
    """Write the tiny model FAMILIES[name] to `path`; returns the transformers model."""
    return build_tiny_llama(path, vector_noise=0.3,
                            rope_parameters=dict(rope_type="default", rope_theta=1e6),
                            **FAMILIES[name])


@pytest.fixture(scope="module", params=["qwen2", "qwen3", "mistral"])
def tiny_llama(request, tmp_path_factory):
    """(model_dir, transformers model) of the parameter's family (test_parity's name)."""
    path = tmp_path_factory.mktemp(request.param)
    return str(path), build_family(path, request.param)


@pytest.fixture(scope="module")
def tiny_tied_llama(tiny_llama):
    """test_host_tier_parity's name for its model: here the parameter's."""
    return tiny_llama



@pytest.mark.parametrize("name", ["qwen2", "qwen3-attention-bias"])
def test_tensor_parallel_two_ranks(tmp_path, name):
    """TP=2 over gloo: q/k/v biases split with their rows (Qwen2's one KV head replicated),
    o_proj's bias added once after the all-reduce, q_norm and k_norm whole on each rank."""
    greedy = GreedyReference(build_family(tmp_path, name))
    prompts = make_prompts()
    _, got = generate_tp2(str(tmp_path), prompts, num_kv_blocks=80)
    assert got == reference(greedy, prompts)


def write_config(path, **fields) -> str:
    """A model directory holding only a tiny `config.json` with `fields`: loading its weights
    would fail, so an error naming a field comes from reading the config."""
    (path / "config.json").write_text(json.dumps({**TINY_LLAMA, **fields}))
    return str(path)


@pytest.mark.parametrize("arch", ["Phi3ForCausalLM", "GemmaForCausalLM"])
def test_unsupported_architecture_names_it_and_the_supported(tmp_path, arch):
    with pytest.raises(ValueError) as info:
        LLM(write_config(tmp_path, architectures=[arch]))
    assert str(info.value) == (
        f"model: architecture {arch!r} is not supported "
        "(supported: FalconForCausalLM, LlamaForCausalLM, MistralForCausalLM, "
        "Qwen2ForCausalLM, Qwen3ForCausalLM)")

