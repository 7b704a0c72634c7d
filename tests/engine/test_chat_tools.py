"""Chat prompts with tools: OpenAI messages keep an assistant's `tool_calls` (arguments
parsed from JSON text) and a tool result's `tool_call_id` and `name`; `tools` reach the chat
template; `chat_template` replaces the model's template; the shipped ChatML tool template
renders exactly; bad tool fields are ValueErrors naming them."""

from __future__ import annotations

from pathlib import Path

import pytest
from transformers import AutoTokenizer

from engine import LLM, ChatPrompt, EngineConfig, SamplingParams
from engine.chat_prompt import MAX_TOOLS

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
CALL = {"id": "c1", "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
MESSAGES = [{"role": "system", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "Paris"},
                                         {"type": "text", "text": "?"}]},
            {"role": "assistant", "content": None, "tool_calls": [CALL]},
            {"role": "tool", "tool_call_id": "c1", "name": "get_weather", "content": "18C"}]
TEMPLATE = Path(__file__).parents[2] / "engine" / "chat_templates" / "chatml_tools.jinja"

RENDERED = """<|im_start|>system
Be brief.

# Tools

You may call one or more functions to answer the user. The functions are described as JSON \
inside <tools></tools>:
<tools>
{"type": "function", "function": {"name": "get_weather", "description": "Weather", \
"parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}
</tools>

To call a function, answer with one JSON object per call, each inside <tool_call></tool_call> \
tags:
<tool_call>
{"name": <function-name>, "arguments": <args-json-object>}
</tool_call><|im_end|>
<|im_start|>user
Paris?<|im_end|>
<|im_start|>assistant
<tool_call>
{"name": "get_weather", "arguments": {"city": "Paris"}}
</tool_call><|im_end|>
<|im_start|>user
<tool_response>
18C
</tool_response><|im_end|>
<|im_start|>assistant
"""


def test_openai_messages_keep_their_tool_fields():
    chat = ChatPrompt.of(MESSAGES, TOOLS)
    assert chat.messages == (("system", "Be brief."), ("user", "Paris?"), ("assistant", ""),
                             ("tool", "18C"))
    assert chat.template_messages()[2] == {
        "role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]}
    assert chat.template_messages()[3] == {"role": "tool", "content": "18C",
                                           "tool_call_id": "c1", "name": "get_weather"}
    assert chat.tools == tuple(TOOLS)
    assert ChatPrompt.of(MESSAGES[:2]).fields == ()  # no tool fields: plain pairs


def test_the_shipped_chatml_template_renders_tools_calls_and_results(tiny_llama_dir):
    chat = ChatPrompt.of(MESSAGES, TOOLS)
    text = AutoTokenizer.from_pretrained(tiny_llama_dir).apply_chat_template(
        chat.template_messages(), tools=list(chat.tools), chat_template=TEMPLATE.read_text(),
        add_generation_prompt=True, tokenize=False)
    assert text == RENDERED


def test_chat_template_replaces_the_models_own(tiny_llama_dir, tmp_path):
    """A word template: w10 per tool offered, w11 per tool call, w12 per tool result."""
    template = tmp_path / "words.jinja"
    template.write_text(
        "{% for t in tools or [] %}w10 {% endfor %}{% for m in messages %}"
        "{% for c in m.tool_calls or [] %}w11 {% endfor %}{% if m.role == 'tool' %}w12 "
        "{% else %}{{ m.content }} {% endif %}{% endfor %}w9")
    llm = LLM(tiny_llama_dir, block_size=8, num_kv_blocks=32, chat_template=str(template))
    chat = ChatPrompt.of([{"role": "user", "content": "w30"},
                          {"role": "assistant", "content": None, "tool_calls": [CALL, CALL]},
                          {"role": "tool", "tool_call_id": "c1", "content": "x"}], TOOLS * 2)
    out = llm.generate(chat, SamplingParams(max_tokens=2, ignore_eos=True))[0]
    assert out.prompt_token_ids == [10, 10, 30, 11, 11, 12, 9]


def test_a_chat_template_that_is_not_a_file_is_refused(tmp_path):
    with pytest.raises(ValueError, match="chat_template: .* is not a file"):
        EngineConfig(model="m", chat_template=str(tmp_path / "missing.jinja"))


@pytest.mark.parametrize("messages, tools, field", [
    ([{"role": "user", "content": "w5", "tool_calls": [CALL]}], None,
     "messages[0].tool_calls: only an assistant"),
    ([{"role": "assistant", "content": None, "tool_calls": [
        {"type": "function", "function": {"name": "f", "arguments": "{bad"}}]}], None,
     "messages[0].tool_calls[0].function.arguments: must be JSON"),
    ([{"role": "assistant", "content": None, "tool_calls": [{"function": {}}]}], None,
     "messages[0].tool_calls[0]: must be"),
    ([{"role": "tool", "tool_call_id": 7, "content": "x"}], None,
     "messages[0].tool_call_id: must be a string"),
    ([{"role": "user"}], None, "messages[0].content: required"),
    ([{"role": "user", "content": "w5"}], [{"type": "retrieval"}], "tools[0]: only function"),
    ([{"role": "user", "content": "w5"}], [{"type": "function", "function": {"name": ""}}],
     "tools[0].function.name"),
    ([{"role": "user", "content": "w5"}], TOOLS * (MAX_TOOLS + 1), f"tools: at most {MAX_TOOLS}"),
])
def test_bad_tool_fields_name_the_field(messages, tools, field):
    with pytest.raises(ValueError) as info:
        ChatPrompt.of(messages, tools)
    assert field in str(info.value)
