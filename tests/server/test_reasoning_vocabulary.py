"""The startup check of a reasoning parser against the model's tokenizer
(server/reasoning_parsers/vocabulary.py): its markers must be single tokens that decoding
keeps; text the tokenizer can only spell out, a special token, or no tokenizer is refused."""

from __future__ import annotations

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from agentix_testing.tiny_llama import save_byte_tokenizer
from engine.tokenizer import load_tokenizer
from server.reasoning_parsers.vocabulary import check_vocabulary


def word_tokenizer(path, words: list[str], special: tuple[str, ...] = ()):
    """The engine's tokenizer over a word-level vocabulary of `words` (after <pad>, <s>,
    </s>), with `special` registered as special tokens."""
    vocab = {word: i for i, word in enumerate(["<pad>", "<s>", "</s>", *words])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<s>",
                            eos_token="</s>", additional_special_tokens=list(special)
                            ).save_pretrained(path)
    return load_tokenizer(path)


@pytest.mark.parametrize("name", ["qwen3", "deepseek_r1"])
def test_a_tokenizer_with_both_think_tokens_passes(tmp_path, name):
    tokenizer = word_tokenizer(tmp_path, ["hello", "<think>", "</think>"])
    assert tokenizer.decode(tokenizer.encode("<think> hello </think>")) == "<think> hello </think>"
    assert check_vocabulary(name, tokenizer) is None


@pytest.mark.parametrize(("words", "missing"), [(["hello"], "<think>"),
                                                (["<think>", "hello"], "</think>")])
def test_a_missing_think_token_is_refused_naming_it(tmp_path, words, missing):
    tokenizer = word_tokenizer(tmp_path, words)
    with pytest.raises(ValueError) as info:
        check_vocabulary("qwen3", tokenizer)
    assert str(info.value) == (f"reasoning parser 'qwen3' needs {missing!r} as one token, and "
                               f"the model's vocabulary has no such token")


def test_markers_the_tokenizer_can_only_spell_out_are_refused(tmp_path):
    save_byte_tokenizer(tmp_path)  # one token per byte: "<think>" is seven tokens
    tokenizer = load_tokenizer(tmp_path)
    assert tokenizer.decode(tokenizer.encode("<think>")) == "<think>"
    with pytest.raises(ValueError, match="needs '<think>' as one token"):
        check_vocabulary("deepseek_r1", tokenizer)


def test_special_think_tokens_are_refused_since_decoding_drops_them(tmp_path):
    tokenizer = word_tokenizer(tmp_path, ["hello", "<think>", "</think>"],
                               special=("<think>", "</think>"))
    assert tokenizer.decode(tokenizer.encode("<think> hello </think>")) == "hello"
    with pytest.raises(ValueError) as info:
        check_vocabulary("qwen3", tokenizer)
    assert str(info.value) == ("reasoning parser 'qwen3' needs '<think>' in the output text, "
                               "and the model's tokenizer drops it when decoding (a special "
                               "token)")


def test_no_tokenizer_or_an_unknown_name_is_refused():
    with pytest.raises(ValueError, match="^reasoning parser 'qwen3' reads output text, and "
                                         "the model has no tokenizer$"):
        check_vocabulary("qwen3", None)
    with pytest.raises(ValueError, match="^unknown reasoning parser 'r1'"):
        check_vocabulary("r1", None)
