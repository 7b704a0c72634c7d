"""What the HTTP door infers a program from (`agentix serve --infer-programs`): a chat
request's messages, one item each, for `scheduler.program_inference`.

An item is the canonical JSON (sorted keys, no spaces) of a message as the chat template
reads it: role, content (text parts joined, an assistant's null content empty), an
assistant's `tool_calls` (arguments parsed from their JSON text) and a tool message's
`tool_call_id` and `name` (`engine.ChatPrompt`). So a client that re-sends its history in
another JSON spelling still extends it. Only a request of one chat prompt has items:
/v1/completions prompts (text or token ids) have no message boundaries, and a batch of
prompts is several conversations.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from engine import ChatPrompt


def chat_items(prompts: Sequence[object]) -> list[bytes] | None:
    """The items of a request's prompts: its one chat prompt's messages (None: not a chat
    request, nothing to infer from)."""
    if len(prompts) != 1 or not isinstance(prompts[0], ChatPrompt):
        return None
    return [json.dumps(message, sort_keys=True, separators=(",", ":"),
                       ensure_ascii=False).encode()
            for message in prompts[0].template_messages()]
