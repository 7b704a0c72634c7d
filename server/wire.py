"""Protobuf messages as plain dicts (for the client library and the HTTP door's JSON),
proto3 optional fields, and the ProgramInfo message of a process-table record (both
servicers'; torch-free: the router imports no engine)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from google.protobuf.message import Message

from server import agentix_pb2 as pb

if TYPE_CHECKING:
    from scheduler.process_table import ProgramRecord

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


def optional(message: Message, field: str) -> float | None:
    """A proto3 `optional` number field's value, None when the sender left it unset."""
    return getattr(message, field) if message.HasField(field) else None


def program_info(record: ProgramRecord, outer: Callable[[str], str]) -> pb.ProgramInfo:
    """A snapshot of a process-table record (call on the engine thread), with its ids as
    the client knows them (`outer`: the caller's namespace)."""
    calls = [pb.CallInfo(call_id=outer(c.call_id), thread_id=c.thread_id or "", arrival=c.arrival,
                         wait=c.wait, service=c.service, queue=c.queue)
             for c in record.active_calls.values()]
    return pb.ProgramInfo(
        program_id=outer(record.program_id), tenant=record.tenant or "", state=record.state.value,
        service=record.service, wait=record.wait, active_calls=calls,
        engine=record.engine or 0, last_call_arrival=record.last_call_arrival or 0.0,
        last_call_completion=record.last_call_completion or 0.0, num_calls=record.num_calls,
        prompt_tokens=record.prompt_tokens, generated_tokens=record.generated_tokens,
        swap_time=record.swap_time, external_time=record.external_time,
        program_class=record.program_class or "")
