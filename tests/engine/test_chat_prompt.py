"""Chat prompts: a conversation goes through the model's own chat template (the generation
prompt appended), giving exactly transformers' greedy tokens on those ids; a bad message or
a model without a template is a ValueError naming the field."""

from __future__ import annotations

import pytest
import torch
from agentix_testing.tiny_llama import build_tiny_llama, hf_greedy
from transformers import AutoModelForCausalLM, AutoTokenizer

from engine import LLM, ChatPrompt, SamplingParams

MESSAGES = [{"role": "system", "content": "w20 w21"}, {"role": "user", "content": "w30 w31"},
            {"role": "assistant", "content": "w40"}, {"role": "user", "content": "w50"}]


def test_chat_prompt_matches_transformers(tiny_llama_dir):
    ids = AutoTokenizer.from_pretrained(tiny_llama_dir).apply_chat_template(
        MESSAGES, add_generation_prompt=True, tokenize=True)
    ids = list(ids["input_ids"] if hasattr(ids, "keys") else ids)
    assert ids == [6, 20, 21, 7, 30, 31, 8, 40, 7, 50, 9]  # the template's marker words
    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir, torch_dtype=torch.float32)
    out = LLM(tiny_llama_dir, block_size=8, num_kv_blocks=32).generate(
        ChatPrompt.of(MESSAGES), SamplingParams(max_tokens=8, ignore_eos=True))[0]
    assert out.prompt_token_ids == ids and out.token_ids == hf_greedy(model, ids, 8)


@pytest.mark.parametrize("messages, field", [
    ([], "messages: must not be empty"),
    ([{"role": "wizard", "content": "w5"}], "messages[0].role"),
    ([{"role": "user", "content": "w5"}, {"role": "user"}], "messages[1]"),
    (["w5"], "messages[0]: must be an object"),
])
def test_bad_messages_name_the_field(messages, field):
    with pytest.raises(ValueError, match=field.replace("[", r"\[").replace("]", r"\]")):
        ChatPrompt.of(messages)


def test_a_model_without_a_chat_template_refuses_chat(tmp_path):
    from agentix_testing.tiny_llama import save_word_tokenizer

    build_tiny_llama(tmp_path, tie_word_embeddings=True)
    save_word_tokenizer(tmp_path)
    config = tmp_path / "tokenizer_config.json"
    config.write_text(config.read_text().replace('"chat_template"', '"unused_template"'))
    (tmp_path / "chat_template.jinja").unlink(missing_ok=True)
    llm = LLM(str(tmp_path), block_size=8, num_kv_blocks=32)
    with pytest.raises(ValueError, match="no chat template"):
        llm.generate(ChatPrompt.of([{"role": "user", "content": "w5"}]))
