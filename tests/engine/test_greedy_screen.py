"""The engine's greedy screen of the LM head (`engine.models.greedy_screen`): which steps take
it, that their tokens are transformers' greedy ones, and when there is none."""

from __future__ import annotations

import pytest
import torch

from engine import LLM, SamplingParams
from engine.models import greedy_screen
from engine.models.greedy_screen import GreedyScreen, make_greedy_screen
from engine.models.layers import CausalLM

PROMPTS = [[5, 9, 33, 2, 71], [12, 40, 41, 7], [3] * 20, [100, 101, 102, 103, 104, 105]]
MAX_TOKENS = 12


@pytest.fixture
def screened_rows(monkeypatch):
    """Every CPU counts as having native bf16 (oneDNN emulates it where not: slower, as
    exact); returns the list each screened step appends its row count to."""
    monkeypatch.setattr(greedy_screen, "cpu_has_native_bf16", lambda: True)
    counts: list[int] = []
    tokens = GreedyScreen.tokens

    def counting(self, hidden):
        counts.append(hidden.shape[0])
        return tokens(self, hidden)

    monkeypatch.setattr(GreedyScreen, "tokens", counting)
    return counts


def generate(model_dir, params, **overrides):
    llm = LLM(model_dir, block_size=8, num_kv_blocks=40, **overrides)
    outputs = llm.generate(PROMPTS, params)
    llm.engine.check_integrity()
    return llm, [o.token_ids for o in outputs]


def test_greedy_steps_are_screened_and_give_transformers_tokens(tiny_llama, tiny_llama_greedy,
                                                                screened_rows):
    model_dir, _ = tiny_llama  # tied and untied heads
    _, got = generate(model_dir, SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True))
    assert got == [tiny_llama_greedy(p, MAX_TOKENS) for p in PROMPTS]
    assert sum(screened_rows) == len(PROMPTS) * MAX_TOKENS  # every token came from it


@pytest.mark.parametrize("params", [
    SamplingParams(max_tokens=4, ignore_eos=True, logprobs=2),
    SamplingParams(max_tokens=4, ignore_eos=True, temperature=0.8, seed=3),
], ids=["logprobs", "sampled"])
def test_steps_that_need_the_logits_compute_them(tiny_llama_dir, screened_rows, params):
    llm, got = generate(tiny_llama_dir, params)
    assert llm.engine.runner.greedy_screen is not None
    assert screened_rows == []
    assert all(len(ids) == 4 for ids in got)


def test_a_mixed_batch_computes_the_logits(tiny_llama_dir, tiny_llama_greedy, screened_rows):
    llm = LLM(tiny_llama_dir, block_size=8, num_kv_blocks=40)
    greedy = SamplingParams(max_tokens=6, ignore_eos=True)
    outputs = llm.generate(PROMPTS[:2], [greedy, SamplingParams(max_tokens=6, ignore_eos=True,
                                                                logprobs=1)])
    assert screened_rows == []
    assert outputs[0].token_ids == LLM(tiny_llama_dir, block_size=8, num_kv_blocks=40,
                                       greedy_screen=False).generate(
        PROMPTS[:1], greedy)[0].token_ids


def test_greedy_screen_false_has_none(tiny_llama_dir, screened_rows):
    llm, _ = generate(tiny_llama_dir, SamplingParams(max_tokens=3), greedy_screen=False)
    assert llm.engine.runner.greedy_screen is None
    assert screened_rows == []


def test_no_screen_without_native_bf16_or_for_a_family_with_its_own_logits(tiny_llama_dir,
                                                                          monkeypatch):
    llm = LLM(tiny_llama_dir, block_size=8, num_kv_blocks=40, greedy_screen=False)
    model = llm.engine.runner.model
    head = torch.nn.Linear(model.args.hidden_size, model.args.vocab_size, bias=False)
    model.lm_head = head  # the packed head has no weight; a plain one to screen
    monkeypatch.setattr(greedy_screen, "cpu_has_native_bf16", lambda: True)
    assert isinstance(make_greedy_screen(model), GreedyScreen)

    class ScaledLogits(type(model)):
        def logits(self, hidden):
            return CausalLM.logits(self, hidden) * 0.5

    model.__class__ = ScaledLogits
    assert make_greedy_screen(model) is None
    model.__class__ = ScaledLogits.__mro__[1]
    model.lm_head = torch.nn.Linear(model.args.hidden_size, model.args.vocab_size)
    assert make_greedy_screen(model) is None  # a bias
    model.lm_head = head
    monkeypatch.setattr(greedy_screen, "cpu_has_native_bf16", lambda: False)
    assert make_greedy_screen(model) is None
