"""The real model: SmolLM2-135M-Instruct's greedy chat answers equal transformers'."""

from __future__ import annotations

import pytest
import torch

from engine import LLM, SamplingParams

pytestmark = pytest.mark.slow

QUESTIONS = [
    "What is the capital of France?",
    "Name three colours of the rainbow.",
    "Write one sentence about cats.",
    "What is 12 plus 30?",
]
MAX_TOKENS = 24


@pytest.fixture(scope="module")
def smollm2_dir():
    from engine.models.smollm2 import ensure_smollm2_dir

    return str(ensure_smollm2_dir())


def test_greedy_chat_answers_match_transformers(smollm2_dir):
    from transformers import AutoModelForCausalLM

    llm = LLM(smollm2_dir, num_kv_blocks=64, max_num_batched_tokens=128)
    prompts = [llm.engine.tokenizer.chat_prompt(q) for q in QUESTIONS]
    outputs = llm.generate(prompts, SamplingParams(max_tokens=MAX_TOKENS))
    llm.engine.check_integrity()

    model = AutoModelForCausalLM.from_pretrained(smollm2_dir, dtype=torch.float32).eval()
    for prompt, out in zip(prompts, outputs):
        with torch.no_grad():
            ref = model.generate(torch.tensor([prompt]), max_new_tokens=MAX_TOKENS,
                                 do_sample=False, attention_mask=torch.ones(1, len(prompt),
                                                                            dtype=torch.long))
        assert out.token_ids == ref[0, len(prompt):].tolist()
    assert "Paris" in outputs[0].text
    assert {o.finish_reason for o in outputs} <= {"stop", "length"}
