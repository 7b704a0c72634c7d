"""The SmolLM2 GGUF -> HF directory conversion (engine/models/smollm2.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from engine.models import smollm2


def _llama_cpp_permute(weight: np.ndarray, n_heads: int) -> np.ndarray:
    """llama.cpp convert_hf_to_gguf's Q/K permutation (HF rotate-half -> interleaved pairs)."""
    return weight.reshape(n_heads, 2, weight.shape[0] // n_heads // 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


def test_unpermute_inverts_llama_cpp_permutation() -> None:
    weight = np.arange(6 * 8 * 5, dtype=np.float32).reshape(6 * 8, 5)  # 6 heads of dim 8
    restored = smollm2._unpermute_rope_rows(_llama_cpp_permute(weight, 6), 6)
    assert np.array_equal(restored, weight)


@pytest.fixture(scope="module")
def model_dir() -> Path:
    return smollm2.ensure_smollm2_dir()


@pytest.mark.slow
def test_converted_config_is_smollm2(model_dir: Path) -> None:
    assert smollm2.is_complete(model_dir)
    config = json.loads((model_dir / "config.json").read_text())
    assert config["model_type"] == "llama"
    assert config["hidden_size"] == 576
    assert config["num_hidden_layers"] == 30
    assert config["num_attention_heads"] == 9
    assert config["num_key_value_heads"] == 3
    assert config["vocab_size"] == 49152
    assert config["tie_word_embeddings"] is True
    assert config["rope_theta"] == config["rope_parameters"]["rope_theta"] == 100000.0
    assert smollm2.ensure_smollm2_dir(model_dir) == model_dir  # cached: no second conversion


@pytest.mark.slow
def test_converted_tokenizer_round_trips_and_has_chat_template(model_dir: Path) -> None:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    text = "Hello world 2024!\n<|im_start|>user\n  déjà vu<|im_end|>"
    ids = tokenizer.encode(text).ids
    assert ids[:3] == [19556, 905, 216]  # "Hello", " world", " " (digits split off one by one)
    assert [tokenizer.token_to_id(t) for t in ("<|endoftext|>", "<|im_start|>", "<|im_end|>")] == [0, 1, 2]
    assert tokenizer.decode(ids, skip_special_tokens=False) == text
    tokenizer_config = json.loads((model_dir / "tokenizer_config.json").read_text())
    assert tokenizer_config["eos_token"] == "<|im_end|>"
    assert "<|im_start|>assistant" in (model_dir / "chat_template.jinja").read_text()


@pytest.mark.slow
def test_transformers_loads_tokenizer_with_chat_template(model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import transformers
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Hi"}], add_generation_prompt=True, tokenize=False
    )
    assert prompt.endswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    assert tokenizer.eos_token_id == 2
