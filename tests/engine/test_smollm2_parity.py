"""The real model: SmolLM2-135M-Instruct's greedy chat answers equal transformers'."""

from __future__ import annotations

import pytest

from agentix_testing.tiny_llama import hf_chat_answers
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
    llm = LLM(smollm2_dir, num_kv_blocks=64, max_num_batched_tokens=128)
    prompts = [llm.engine.tokenizer.chat_prompt(q) for q in QUESTIONS]
    outputs = llm.generate(prompts, SamplingParams(max_tokens=MAX_TOKENS))
    llm.engine.check_integrity()
    assert [o.token_ids for o in outputs] == hf_chat_answers(smollm2_dir, prompts, MAX_TOKENS)
    assert "Paris" in outputs[0].text
    assert {o.finish_reason for o in outputs} <= {"stop", "length"}
