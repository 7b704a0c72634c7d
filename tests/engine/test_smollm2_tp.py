"""SmolLM2-135M split three ways (its 9 heads and 3 KV heads do not split in two) gives
transformers' greedy chat answers exactly."""

from __future__ import annotations

import pytest

from agentix_testing.tiny_llama import hf_chat_answers
from engine import LLM, SamplingParams

pytestmark = pytest.mark.slow

QUESTIONS = ["What is the capital of France?", "Write one sentence about cats."]
MAX_TOKENS = 16


def test_smollm2_at_tensor_parallel_3_matches_transformers():
    from engine.models.smollm2 import ensure_smollm2_dir

    model_dir = str(ensure_smollm2_dir())
    with LLM(model_dir, tensor_parallel_size=3, num_kv_blocks=64) as llm:
        prompts = [llm.engine.tokenizer.chat_prompt(q) for q in QUESTIONS]
        outputs = llm.generate(prompts, SamplingParams(max_tokens=MAX_TOKENS))
        llm.engine.check_integrity()
    assert [o.token_ids for o in outputs] == hf_chat_answers(model_dir, prompts, MAX_TOKENS)
    assert "Paris" in outputs[0].text
