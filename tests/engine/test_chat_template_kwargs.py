"""A chat's extra template variables (`ChatPrompt.template_kwargs`, vLLM's
`chat_template_kwargs`) and an assistant's `reasoning_content` reach the chat template, on a
tiny word tokenizer whose template reads both; template variables that are not an object,
name what the server sets, or are too large are ValueErrors naming them."""

from __future__ import annotations

import inspect

import pytest
from tokenizers import Tokenizer as WordTokenizer
from tokenizers import models, pre_tokenizers
from transformers import PreTrainedTokenizerBase, PreTrainedTokenizerFast

from engine import ChatPrompt
from engine.chat_prompt import MAX_TEMPLATE_KWARGS_BYTES, RESERVED_TEMPLATE_KWARGS
from engine.tokenizer import load_tokenizer

WORDS = ["<pad>", "<s>", "</s>", "go", "hello", "hm", "<think>", "</think>", "brief"]
TEMPLATE = ("{% for m in messages %}{% if m.reasoning_content %}<think> "
            "{{ m.reasoning_content }} </think> {% endif %}{{ m.content }} {% endfor %}"
            "{% if style is defined %}{{ style }} {% endif %}go"
            "{% if enable_thinking is defined and not enable_thinking %} <think> </think>"
            "{% endif %}")
HELLO = [{"role": "user", "content": "hello"}]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    path = tmp_path_factory.mktemp("kwargs-tokenizer")
    tok = WordTokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<s>",
                            eos_token="</s>", chat_template=TEMPLATE).save_pretrained(path)
    return load_tokenizer(path)


def words(tokenizer, chat: ChatPrompt) -> list[str]:
    return [WORDS[i] for i in tokenizer.render_chat(chat)]


@pytest.mark.parametrize("kwargs, expected", [
    (None, ["hello", "go"]),
    ({"enable_thinking": False}, ["hello", "go", "<think>", "</think>"]),
    ({"enable_thinking": True, "style": "brief"}, ["hello", "brief", "go"]),
])
def test_template_kwargs_reach_the_template(tokenizer, kwargs, expected):
    assert words(tokenizer, ChatPrompt.of(HELLO, None, kwargs)) == expected


def test_an_assistants_reasoning_content_reaches_the_template(tokenizer):
    messages = [*HELLO, {"role": "assistant", "content": "hm", "reasoning_content": "hm hm"}]
    assert words(tokenizer, ChatPrompt.of(messages)) == [
        "hello", "<think>", "hm", "hm", "</think>", "hm", "go"]


@pytest.mark.parametrize("messages, kwargs, message", [
    (HELLO, ["enable_thinking"], "chat_template_kwargs: must be an object"),
    (HELLO, {"tokenize": False}, "chat_template_kwargs.tokenize: set by the server, not by a "
                                 "request"),
    (HELLO, {"messages": []}, "chat_template_kwargs.messages: set by the server, not by a "
                              "request"),
    (HELLO, {"x": "y" * MAX_TEMPLATE_KWARGS_BYTES},
     f"chat_template_kwargs: {MAX_TEMPLATE_KWARGS_BYTES + 9} bytes as JSON exceed the limit "
     f"of {MAX_TEMPLATE_KWARGS_BYTES}"),
    (HELLO, {"x": {1, 2}}, "chat_template_kwargs: must hold JSON values"),
    ([{"role": "user", "content": "hello", "reasoning_content": "hm"}], None,
     "messages[0].reasoning_content: only an assistant message has it, as a string"),
    ([{"role": "assistant", "content": "hm", "reasoning_content": 3}], None,
     "messages[0].reasoning_content: only an assistant message has it, as a string"),
])
def test_bad_template_fields_are_value_errors_naming_them(messages, kwargs, message):
    with pytest.raises(ValueError) as info:
        ChatPrompt.of(messages, None, kwargs)
    assert str(info.value) == message


def test_every_argument_of_transformers_rendering_is_reserved():
    arguments = set(inspect.signature(PreTrainedTokenizerBase.apply_chat_template).parameters)
    assert arguments - {"self", "kwargs"} <= RESERVED_TEMPLATE_KWARGS
