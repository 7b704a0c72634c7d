"""Tiny Llama checkpoints that say one fixed answer to every chat, for tests of the doors'
output parsing (imported by the tests that need them): `build_tool_call_model` answers with
one hermes-style tool call; `build_successor_model` with any words.

Their word-level vocabulary spells the answer, and their weights make them successor models:
the layers add nothing (zero output projections), embeddings are one-hot and the head maps
token k to token k + 1, so after the chat template's generation prompt word `go` they emit
the answer's words in order and then EOS, sampled as well as greedy (the next word's logit
is about 57 above every other's). The tool-call model's template shows each
message's content, a `tools` word when tools are offered, and the generation prompt."""

from __future__ import annotations

import torch

CALL_WORDS = ["<tool_call>", '{"name":', '"get_weather",', '"arguments":', '{"city":',
              '"Paris"}}', "</tool_call>"]
CALL_TEXT = " ".join(CALL_WORDS)  # what the model says (the word tokenizer joins by spaces)
CALL_ARGUMENTS = '{"city": "Paris"}'  # the arguments of the call it makes, as parsed
# The final norm makes a one-hot hidden state sqrt(32) ~ 5.7 at its word: logit ~ 57 for the
# next word, 0 for the rest, so sampling at temperature 1 picks another once in ~1e23.
HEAD_WEIGHT = 10.0
TEMPLATE = ("{% if tools %}tools {% endif %}{% for m in messages %}{{ m.content }} "
            "{% endfor %}{% if add_generation_prompt %}go{% endif %}")


def successor_vocab(answer: list[str]) -> list[str]:
    """The vocabulary of a model that answers `answer`: ids in this order."""
    return ["<pad>", "<s>", "go", *answer, "</s>", "tools", "hello", "sunny"]


def build_tool_call_model(path) -> None:
    """Write the tool-call model's checkpoint and tokenizer to `path`."""
    build_successor_model(path, CALL_WORDS, TEMPLATE)


def build_successor_model(path, answer: list[str], template: str) -> None:
    """Write to `path` a model that answers `answer` (then EOS) after the word `go`, and its
    word tokenizer with chat template `template`."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    vocab = successor_vocab(answer)
    hidden = 32
    config = LlamaConfig(vocab_size=len(vocab), hidden_size=hidden, intermediate_size=32,
                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                         max_position_embeddings=256, bos_token_id=1,
                         eos_token_id=vocab.index("</s>"), tie_word_embeddings=False)
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        model.model.embed_tokens.weight.zero_()
        model.lm_head.weight.zero_()
        for k in range(len(vocab)):
            model.model.embed_tokens.weight[k, k] = 1.0
            model.lm_head.weight[(k + 1) % len(vocab), k] = HEAD_WEIGHT
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
    model.save_pretrained(path)
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(vocab)}, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<s>",
                            eos_token="</s>", chat_template=template).save_pretrained(path)
