"""The models and prompts of the parity step, and transformers' greedy reference for them."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from bench.studies.gpu_check import smollm2

TINY_PROMPT_LENGTHS = [3, 7, 12, 17, 22, 29, 33, 40]  # as tests/engine/test_parity.py
TINY_OUTPUT_LENGTHS = [9, 24, 5, 16, 20, 12, 7, 18]
TINY_SHARED_PREFIX = 20  # two full 8-token blocks for prefix caching
QUESTIONS = [
    "What is the capital of France?",
    "Name three colours of the rainbow.",
    "Write one sentence about cats.",
    "What is 12 plus 30?",
    "Explain what a prime number is.",
    "Give me a synonym for happy.",
    "How many legs does a spider have?",
    "Translate 'good morning' into French.",
]
SMOLLM2_MAX_TOKENS = 32


@dataclass(frozen=True)
class Case:
    """One model compared: the engine loads `model_dir` in `dtype`; `hf_model` is the same
    weights in transformers, in `dtype` on the device. Prompt i generates up to
    `max_tokens[i]` tokens; with `ignore_eos` EOS is an ordinary token for both (transformers
    gets no EOS id), else both stop at EOS."""

    name: str
    model_dir: str
    hf_model: Any
    dtype: str
    block_size: int
    prompts: list[list[int]]
    max_tokens: list[int]
    ignore_eos: bool

    def blocks(self) -> list[int]:
        """KV blocks each sequence needs at its longest."""
        return [-(-(len(p) + n) // self.block_size) for p, n in zip(self.prompts, self.max_tokens)]


def tiny_cases(root: Path, device: str, dtype: str) -> list[Case]:
    """The tests' tiny GQA Llama, tied and untied, saved under `root`, on random prompts with
    a shared prefix."""
    from agentix_testing.tiny_llama import TINY_LLAMA, build_tiny_llama

    rng = random.Random(0)
    vocab = TINY_LLAMA["vocab_size"]
    prefix = [rng.randrange(3, vocab) for _ in range(TINY_SHARED_PREFIX)]
    prompts = [prefix + [rng.randrange(3, vocab) for _ in range(n)] for n in TINY_PROMPT_LENGTHS]
    cases = []
    for name, tied in (("tiny-tied", True), ("tiny-untied", False)):
        model = build_tiny_llama(root / name, tie_word_embeddings=tied)
        cases.append(Case(name, str(root / name), model.to(device, getattr(torch, dtype)), dtype,
                          8, prompts, TINY_OUTPUT_LENGTHS, ignore_eos=True))
    return cases


def smollm2_case(device: str, dtype: str) -> Case:
    """SmolLM2-135M-Instruct on one-turn chat questions through its chat template."""
    from transformers import AutoModelForCausalLM

    from engine.tokenizer import Tokenizer

    model_dir = smollm2.model_dir()
    tokenizer = Tokenizer(Path(model_dir))
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, dtype))
    return Case("smollm2", model_dir, model.to(device).eval(), dtype, 16,
                [tokenizer.chat_prompt(q) for q in QUESTIONS],
                [SMOLLM2_MAX_TOKENS] * len(QUESTIONS), ignore_eos=False)


def hf_greedy(case: Case, i: int) -> list[int]:
    """transformers' greedy continuation of prompt i."""
    prompt, n = case.prompts[i], case.max_tokens[i]
    ids = torch.tensor([prompt], device=case.hf_model.device)
    eos = dict(eos_token_id=[], pad_token_id=0) if case.ignore_eos else {}
    with torch.no_grad():
        out = case.hf_model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n,
                                     do_sample=False, **eos)
    return out[0, len(prompt):].tolist()


def hf_margin(case: Case, i: int, ref: list[int], got: list[int], at: int) -> float | None:
    """transformers' logit for its own token `ref[at]` minus its logit for the engine's
    `got[at]`, after prompt i + ref[:at]: how near a tie the divergence is. None when either
    sequence ended before `at`."""
    if at >= len(ref) or at >= len(got):
        return None
    ids = torch.tensor([case.prompts[i] + ref[:at]], device=case.hf_model.device)
    with torch.no_grad():
        logits = case.hf_model(ids).logits[0, -1].float()
    return (logits[ref[at]] - logits[got[at]]).item()
