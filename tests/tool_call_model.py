"""A tiny Llama checkpoint that answers every chat with one hermes-style tool call, for
tests of tool calling through the doors (imported by the tests that need it).

Its word-level vocabulary (CALL_WORDS) spells a call, and its weights make it a successor
model: the layers add nothing (zero output projections), embeddings are one-hot and the
head maps token k to token k + 1, so after the chat template's generation prompt word `go`
it emits the words of the call in order and then EOS. Its template shows each message's
content, a `tools` word when tools are offered, and the generation prompt."""

from __future__ import annotations

import torch

CALL_WORDS = ["<tool_call>", '{"name":', '"get_weather",', '"arguments":', '{"city":',
              '"Paris"}}', "</tool_call>"]
VOCAB = ["<pad>", "<s>", "go", *CALL_WORDS, "</s>", "tools", "hello", "sunny"]
EOS_ID = VOCAB.index("</s>")
CALL_TEXT = " ".join(CALL_WORDS)  # what the model says (the word tokenizer joins by spaces)
CALL_ARGUMENTS = '{"city": "Paris"}'  # the arguments of the call it makes, as parsed
TEMPLATE = ("{% if tools %}tools {% endif %}{% for m in messages %}{{ m.content }} "
            "{% endfor %}{% if add_generation_prompt %}go{% endif %}")


def build_tool_call_model(path) -> None:
    """Write the checkpoint and its tokenizer to `path`."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    hidden = 32
    config = LlamaConfig(vocab_size=len(VOCAB), hidden_size=hidden, intermediate_size=32,
                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                         max_position_embeddings=256, bos_token_id=1, eos_token_id=EOS_ID,
                         tie_word_embeddings=False)
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        model.model.embed_tokens.weight.zero_()
        model.lm_head.weight.zero_()
        for k in range(len(VOCAB)):
            model.model.embed_tokens.weight[k, k] = 1.0
            model.lm_head.weight[(k + 1) % len(VOCAB), k] = 1.0
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
    model.save_pretrained(path)
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(VOCAB)}, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<s>",
                            eos_token="</s>", chat_template=TEMPLATE).save_pretrained(path)
