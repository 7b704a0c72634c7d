"""Sampling behaviour: seeds, top-k, stop strings and stop ids."""

from __future__ import annotations

import pytest
import torch

from engine import LLM, SamplingParams
from engine.sampler import Sampler, filter_logits

PROMPTS = [[5, 17, 33, 90], [7, 8, 9, 10, 11, 12, 200], [300, 301]]


@pytest.fixture(scope="module")
def llm(tiny_llama_dir):
    return LLM(tiny_llama_dir, block_size=8, num_kv_blocks=64)


def tokens(llm, params):
    out = llm.generate(PROMPTS, params)
    llm.engine.check_integrity()
    return [o.token_ids for o in out]


def test_same_seed_same_tokens_whatever_the_batch(llm):
    seeded = SamplingParams(temperature=1.0, seed=1234, max_tokens=12, ignore_eos=True)
    alone = tokens(llm, [seeded] * 3)
    other = SamplingParams(temperature=1.0, seed=99, max_tokens=12, ignore_eos=True)
    mixed = tokens(llm, [seeded, other, seeded])
    assert alone[0] == mixed[0] and alone[2] == mixed[2]
    assert mixed[1] != mixed[0]


def test_different_seeds_differ(llm):
    a = tokens(llm, SamplingParams(temperature=1.0, seed=1, max_tokens=16, ignore_eos=True))
    b = tokens(llm, SamplingParams(temperature=1.0, seed=2, max_tokens=16, ignore_eos=True))
    assert a != b


def test_top_k_one_equals_greedy(llm):
    greedy = tokens(llm, SamplingParams(max_tokens=10, ignore_eos=True))
    top1 = tokens(llm, SamplingParams(temperature=0.8, top_k=1, max_tokens=10, ignore_eos=True))
    assert top1 == greedy


def test_stop_token_ids_end_the_call(llm):
    greedy = tokens(llm, SamplingParams(max_tokens=10, ignore_eos=True))[0]
    stop_at = greedy[3]
    first = greedy.index(stop_at)
    out = llm.generate(PROMPTS[0], SamplingParams(max_tokens=10, ignore_eos=True,
                                                  stop_token_ids=(stop_at,)))[0]
    assert out.token_ids == greedy[:first + 1]
    assert out.finish_reason == "stop"


def test_stop_string_ends_the_call_and_is_cut_from_the_text(llm):
    greedy = llm.generate(PROMPTS[0], SamplingParams(max_tokens=10, ignore_eos=True))[0]
    words = greedy.text.split()
    assert words == [f"w{t}" for t in greedy.token_ids]
    stop = words[4]
    out = llm.generate(PROMPTS[0], SamplingParams(max_tokens=10, ignore_eos=True,
                                                  stop=(stop,)))[0]
    first = words.index(stop)
    assert out.finish_reason == "stop"
    assert out.token_ids == greedy.token_ids[:first + 1]
    assert out.text == " ".join(words[:first]) + " "


def test_a_stop_string_on_the_last_allowed_token_is_a_stop(llm):
    greedy = llm.generate(PROMPTS[0], SamplingParams(max_tokens=10, ignore_eos=True))[0]
    words = greedy.text.split()
    first = words.index(words[4])  # the stop string first appears at token `first`
    out = llm.generate(PROMPTS[0], SamplingParams(max_tokens=first + 1, ignore_eos=True,
                                                  stop=(words[4],)))[0]
    assert (out.finish_reason, out.token_ids) == ("stop", greedy.token_ids[:first + 1])
    assert out.text == " ".join(words[:first]) + " "
    llm.engine.check_integrity()


def test_text_prompts_are_tokenized(llm):
    by_text = llm.generate("w5 w17 w33 w90", SamplingParams(max_tokens=6, ignore_eos=True))[0]
    by_ids = llm.generate(PROMPTS[0], SamplingParams(max_tokens=6, ignore_eos=True))[0]
    assert by_text.prompt_token_ids == PROMPTS[0]
    assert by_text.token_ids == by_ids.token_ids


def test_max_tokens_gives_length(llm):
    out = llm.generate(PROMPTS[1], SamplingParams(max_tokens=5, ignore_eos=True))[0]
    assert len(out.token_ids) == 5 and out.finish_reason == "length"


def test_filter_logits_top_p_keeps_the_nucleus():
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    kept = filter_logits(logits, top_k=0, top_p=0.7).isfinite().tolist()
    assert kept == [True, True, False, False]
    kept = filter_logits(logits, top_k=3, top_p=1.0).isfinite().tolist()
    assert kept == [True, True, True, False]


def test_seeded_sampler_follows_the_distribution():
    sampler = Sampler(seed=0)
    logits = torch.log(torch.tensor([[0.7, 0.2, 0.1]]))
    p = SamplingParams(temperature=1.0, seed=5)
    draws = [sampler(logits, [p], [pos])[0] for pos in range(2000)]
    share = draws.count(0) / len(draws)
    assert 0.65 < share < 0.75
