"""Protobuf messages as plain dicts (for the client library and the HTTP door's JSON)."""

from __future__ import annotations

from typing import Any

from google.protobuf.message import Message

SHUTDOWN = "shutdown"  # the finish reason of a call cut by a server's drain: retry it


def message_to_dict(message: Message) -> dict[str, Any]:
    """Every field of `message` by its proto name (defaults included), nested messages as
    dicts and repeated fields as lists."""
    out: dict[str, Any] = {}
    for field in message.DESCRIPTOR.fields:
        value = getattr(message, field.name)
        if field.message_type is not None:
            value = ([message_to_dict(v) for v in value] if field.is_repeated
                     else message_to_dict(value))
        elif field.is_repeated:
            value = list(value)
        out[field.name] = value
    return out
