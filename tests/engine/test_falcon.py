"""Falcon (new decoder architecture) gives exactly transformers' greedy tokens, and Falcon
configs the engine cannot run fail before loading, in one line.

test_parity's tests (batching, late arrivals, chunked prefill, prefix caching, preemption by
recompute, swap and keep, multistep) and test_host_tier_parity's (a prefix through the host
tier, swap under pressure with prefix caching) run here unchanged on tiny Falcons: they are
imported, so pytest collects them in this module, where `tiny_llama` and `tiny_llama_greedy`
are overridden. The tiny models have noise on every LayerNorm weight and bias and every linear
bias (`vector_noise`), an MLP width that is not 4 x hidden, and RoPE theta 1e6; "kv2" has 2 KV
groups of 2 query heads, biases, two LayerNorms per layer and a tied head; "kv1" one KV head,
no biases, one shared `input_layernorm` and an untied head."""

from __future__ import annotations

import json

import pytest
import torch

from agentix_testing.tiny_llama import GreedyReference, save_word_tokenizer
from engine import LLM, ChatPrompt, SamplingParams
from engine.models.falcon import FalconArgs
from engine.parallel.layout import ShardLayout
from engine_mode_tests import *  # noqa: F401,F403  (collected here, on this module's fixtures)
from test_parity import make_prompts, reference
from test_host_tier_parity import (  # noqa: F401  (collected here, on this module's fixtures)
    test_a_prefix_offloaded_to_host_is_fetched_back_token_exact as test_host_tier_fetch,
    test_swap_preemption_under_memory_pressure_with_prefix_caching_is_token_exact as test_host_swap,
)
from test_tp_parity import generate_tp2

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TINY_FALCON = dict(
    architectures=["FalconForCausalLM"], vocab_size=384, hidden_size=64, ffn_hidden_size=96,
    num_hidden_layers=2, num_attention_heads=4, num_kv_heads=2, new_decoder_architecture=True,
    max_position_embeddings=256, layer_norm_epsilon=1e-5, bos_token_id=1, eos_token_id=2,
    initializer_range=0.3, rope_parameters=dict(rope_type="default", rope_theta=1e6),
)
VARIANTS = {
    "kv2": dict(bias=True, tie_word_embeddings=True),
    "kv1": dict(num_kv_heads=1, bias=False, num_ln_in_parallel_attn=1,
                tie_word_embeddings=False),
}


def build_tiny_falcon(path, name: str, seed: int = 0, vector_noise: float = 0.3):
    """Write the tiny FalconForCausalLM VARIANTS[name] to `path`; returns the transformers
    model. transformers makes biases 0 and LayerNorm weights 1: `vector_noise` (std) is added
    to every 1-D parameter, so that one the engine drops or misplaces changes the tokens."""
    from transformers import FalconConfig, FalconForCausalLM

    torch.manual_seed(seed)
    fields = {**TINY_FALCON, **VARIANTS[name]}
    del fields["architectures"]
    config = FalconConfig(**fields)
    model = FalconForCausalLM(config).eval()
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() == 1:
                param.add_(torch.randn_like(param), alpha=vector_noise)
    model.save_pretrained(path)
    return model


@pytest.fixture(scope="module", params=list(VARIANTS))
def tiny_llama(request, tmp_path_factory):
    """(model_dir, transformers model) of the parameter's Falcon (test_parity's name)."""
    path = tmp_path_factory.mktemp(f"falcon-{request.param}")
    return str(path), build_tiny_falcon(path, request.param)


@pytest.fixture(scope="module")
def tiny_tied_llama(tiny_llama):
    """test_host_tier_parity's name for its model: here the parameter's."""
    return tiny_llama



@pytest.mark.parametrize("name", list(VARIANTS))
def test_tensor_parallel_two_ranks(tmp_path, name):
    """TP=2 over gloo: kv2 puts one KV group (its two query heads, key and value rows and
    biases) on each rank, kv1 replicates its one KV group, each rank taking 2 query heads;
    dense and dense_4h_to_h add their biases once after the all-reduce."""
    greedy = GreedyReference(build_tiny_falcon(tmp_path, name))
    prompts = make_prompts()
    _, got = generate_tp2(str(tmp_path), prompts, num_kv_blocks=80)
    assert got == reference(greedy, prompts)


def test_fused_qkv_rows_per_rank():
    """head_dim 16: kv2 groups are rows [0, 64) and [64, 128), each 2 query heads, k, v;
    one group of 4 query heads over 2 ranks: rank 1 keeps query heads 2-3, then k and v."""
    kv2 = FalconArgs.from_hf_config({**TINY_FALCON, **VARIANTS["kv2"]})
    assert [ShardLayout(kv2, r, 2).fused_qkv_rows() for r in range(2)] == [
        [slice(0, 32), slice(32, 64)], [slice(64, 96), slice(96, 128)]]
    kv1 = FalconArgs.from_hf_config({**TINY_FALCON, **VARIANTS["kv1"]})
    assert [ShardLayout(kv1, r, 2).fused_qkv_rows() for r in range(2)] == [
        [slice(0, 32), slice(64, 96)], [slice(32, 64), slice(64, 96)]]


def test_config_defaults_follow_transformers():
    """Unset: num_kv_heads = heads, ffn_hidden_size = 4 x hidden, two LayerNorms, tied,
    no bias, theta 10000 (a transformers 4 config: `rope_theta` at the top level too)."""
    cfg = {k: v for k, v in TINY_FALCON.items()
           if k not in ("num_kv_heads", "ffn_hidden_size", "rope_parameters")}
    args = FalconArgs.from_hf_config(cfg)
    assert (args.num_kv_heads, args.intermediate_size, args.num_ln_in_parallel_attn,
            args.tie_word_embeddings, args.bias, args.rope_theta, args.head_dim) == (
        4, 256, 2, True, False, 10000.0, 16)
    assert FalconArgs.from_hf_config({**cfg, "rope_theta": 500.0}).rope_theta == 500.0


def write_config(path, **fields) -> str:
    """A model directory holding only a tiny Falcon `config.json` with `fields`: loading its
    weights would fail, so an error naming a field comes from reading the config."""
    (path / "config.json").write_text(json.dumps({**TINY_FALCON, **fields}))
    return str(path)


@pytest.mark.parametrize("fields, message", [
    (dict(new_decoder_architecture=False), "model: new_decoder_architecture: false is not "
                                           "supported (only the Falcon-40B/180B layout is built)"),
    (dict(alibi=True), "model: alibi: true is not supported (only rotary positions are built)"),
    (dict(parallel_attn=False), "model: parallel_attn: false is not supported (only attention "
                                "and MLP in parallel are built)"),
    (dict(num_ln_in_parallel_attn=3), "model: num_ln_in_parallel_attn 3 is not supported "
                                      "(1 or 2)"),
    (dict(activation="relu"), "model: activation 'relu' is not supported (gelu)"),
    (dict(rope_parameters=dict(rope_type="linear", factor=2.0, rope_theta=1e4)),
     "model: rope_type 'linear' is not supported (default)"),
])
def test_unsupported_configs_name_the_field(tmp_path, fields, message):
    with pytest.raises(ValueError) as info:
        LLM(write_config(tmp_path, **fields))
    assert str(info.value) == message


@pytest.mark.parametrize("fields, world, message", [
    (dict(num_attention_heads=4, hidden_size=64), 3,
     "tensor_parallel_size 3 does not divide the model's num_attention_heads 4"),
    (dict(num_attention_heads=6, hidden_size=96, num_kv_heads=3), 2,
     "tensor_parallel_size 2 must divide or be a multiple of the model's num_kv_heads 3"),
    (dict(ffn_hidden_size=90), 4,
     "tensor_parallel_size 4 does not divide the model's ffn_hidden_size 90"),
])
def test_bad_tensor_parallel_splits_name_falcons_field(tmp_path, fields, world, message):
    with pytest.raises(ValueError) as info:
        LLM(write_config(tmp_path, **fields), tensor_parallel_size=world)
    assert str(info.value) == message


def test_chat_goes_through_a_given_template_when_the_tokenizer_has_none(tmp_path):
    """Falcon's tokenizers ship no chat template: chat is refused, until `chat_template`
    gives one (here a word template: the user's words, then w9)."""
    build_tiny_falcon(tmp_path, "kv1")
    save_word_tokenizer(tmp_path)
    config = tmp_path / "tokenizer_config.json"
    config.write_text(config.read_text().replace('"chat_template"', '"unused_template"'))
    (tmp_path / "chat_template.jinja").unlink(missing_ok=True)
    chat = ChatPrompt.of([{"role": "user", "content": "w30 w31"}])
    with pytest.raises(ValueError, match="no chat template"):
        LLM(str(tmp_path), block_size=8, num_kv_blocks=16).generate(chat)
    template = tmp_path / "words.jinja"
    template.write_text("{% for m in messages %}{{ m.content }} {% endfor %}w9")
    llm = LLM(str(tmp_path), block_size=8, num_kv_blocks=16, chat_template=str(template))
    out = llm.generate(chat, SamplingParams(max_tokens=2, ignore_eos=True))[0]
    assert out.prompt_token_ids == [30, 31, 9] and len(out.token_ids) == 2
