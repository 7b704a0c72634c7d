"""The demo's calculator tool and chat formatting."""

from __future__ import annotations

import pytest

from server.demo import calculate, chat_prompt


@pytest.mark.parametrize("text, result", [
    ("17 * 23", "391"),
    ("The answer is (17 * 23) pens.", "391"),
    ("10 / 4", "2.5"),
    ("2 + 3 * 4", "14"),
    ("(3 - 5)", "-2"),
    ("A box of 17 pens holds 23 pens.", "error: no arithmetic expression found"),
    ("no numbers here", "error: no arithmetic expression found"),
    ("1 / 0 then 6 * 7", "42"),
    ("__import__('os')", "error: no arithmetic expression found"),
])
def test_calculator(text, result):
    assert calculate(text) == result


def test_chat_prompt_is_the_system_prompt_then_the_turns():
    messages = chat_prompt([("user", "Hi"), ("assistant", "Hello"), ("user", "Bye")])
    assert messages[0]["role"] == "system"
    assert messages[1:] == [{"role": "user", "content": "Hi"},
                            {"role": "assistant", "content": "Hello"},
                            {"role": "user", "content": "Bye"}]
