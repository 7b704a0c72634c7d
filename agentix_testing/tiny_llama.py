"""Tiny random Llama (or Qwen2, Qwen3) checkpoints written as HF directories, and the
transformers greedy reference for them (imported by tests/conftest.py, by tests that need the
reference, and by the benchmarks that build a tiny model: the GPU check, the memory floods)."""

from __future__ import annotations

import torch

TINY_LLAMA = dict(
    vocab_size=384, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=256,
    rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2, initializer_range=0.3,
    rope_parameters=dict(rope_type="llama3", rope_theta=10000.0, factor=8.0,
                         low_freq_factor=1.0, high_freq_factor=4.0,
                         original_max_position_embeddings=32),
)


def build_tiny_llama(path, tie_word_embeddings: bool, seed: int = 0, family: str = "Llama",
                     vector_noise: float = 0.0, **overrides):
    """Write a tiny model of transformers' `{family}Config` and `{family}ForCausalLM`
    (TINY_LLAMA with `overrides`) to `path`; returns the HF model. `vector_noise` is the std
    of noise added to every 1-D parameter (transformers makes biases 0 and norm weights 1), so
    that a bias or norm weight the engine drops or misplaces changes the tokens."""
    import transformers

    torch.manual_seed(seed)
    config = getattr(transformers, f"{family}Config")(
        **{**TINY_LLAMA, **overrides}, tie_word_embeddings=tie_word_embeddings)
    model = getattr(transformers, f"{family}ForCausalLM")(config).eval()
    with torch.no_grad():
        for param in model.parameters():
            if vector_noise and param.dim() == 1:
                param.add_(torch.randn_like(param), alpha=vector_noise)
    model.save_pretrained(path)
    return model


# Each turn is its role's marker word, then its content; the generation prompt is w9.
WORD_CHAT_TEMPLATE = (
    "{% for m in messages %}{{ {'system': 'w6', 'user': 'w7', 'assistant': 'w8', 'tool': 'w5'}"
    "[m['role']] }} {{ m['content'] }} {% endfor %}{% if add_generation_prompt %}w9{% endif %}")


def save_word_tokenizer(path) -> None:
    """A word-level tokenizer whose token i is the word `w{i}` (ids 0-2: pad, bos, eos),
    with a chat template of marker words (WORD_CHAT_TEMPLATE)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {f"w{i}": i for i in range(TINY_LLAMA["vocab_size"])}
    vocab.update({"<pad>": 0, "<s>": 1, "</s>": 2})
    del vocab["w0"], vocab["w1"], vocab["w2"]
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<s>",
                            eos_token="</s>", chat_template=WORD_CHAT_TEMPLATE
                            ).save_pretrained(path)


BYTE_CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant: {% endif %}")


def save_byte_tokenizer(path) -> None:
    """A byte-level tokenizer (GPT-2's byte alphabet, no merges: one token per byte, ids
    3-258; 0-2: pad, bos, eos) with a plain chat template, so that any text, JSON included,
    can be spelled (constrained decoding tests)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, **{ch: 3 + i for i, ch in enumerate(alphabet)}}
    tok = Tokenizer(models.BPE(vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<s>",
                            eos_token="</s>", chat_template=BYTE_CHAT_TEMPLATE
                            ).save_pretrained(path)


def hf_greedy(model, prompt: list[int], max_new_tokens: int) -> list[int]:
    """transformers' own greedy continuation, EOS an ordinary token (no EOS id: like the
    engine's `ignore_eos`, and unlike `min_new_tokens`, which masks EOS out)."""
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt),
                             dtype=torch.long), max_new_tokens=max_new_tokens,
                             eos_token_id=[], do_sample=False, pad_token_id=0)
    return out[0, len(prompt):].tolist()


class GreedyReference:
    """transformers' greedy continuations of one model, each (prompt, length) computed once.
    Lives as long as its model (a session fixture beside it), so a cached answer can never
    belong to another model."""

    def __init__(self, model) -> None:
        self._model = model
        self._answers: dict[tuple[tuple[int, ...], int], list[int]] = {}

    def __call__(self, prompt: list[int], max_new_tokens: int) -> list[int]:
        key = (tuple(prompt), max_new_tokens)
        if key not in self._answers:
            self._answers[key] = hf_greedy(self._model, prompt, max_new_tokens)
        return self._answers[key]


def hf_chat_answers(model_dir, prompts: list[list[int]], max_new_tokens: int) -> list[list[int]]:
    """transformers' greedy answers (float32, stopping at the model's EOS) to token prompts."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    answers = []
    for prompt in prompts:
        with torch.no_grad():
            out = model.generate(torch.tensor([prompt]), max_new_tokens=max_new_tokens,
                                 do_sample=False, attention_mask=torch.ones(1, len(prompt),
                                                                            dtype=torch.long))
        answers.append(out[0, len(prompt):].tolist())
    return answers
