"""The engine-thread half of adding a call, shared by the gRPC and HTTP front doors: an
implicitly started program (HTTP), then `add_call`. Ids here are the engine's
(already in the caller's namespace, server/namespace.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from engine import LLMEngine, SamplingParams
from engine.errors import UnknownProgramError


@dataclass(frozen=True)
class CallRequest:
    """A call as a front door received it. `program_id=None`: a one-call program of
    `tenant`; `start_unknown`: a named program that does not exist is started for `tenant`
    with `program_class` (HTTP clients cannot call StartProgram; the class of a program that
    exists is left as it was). `prompt` is token ids, already tokenized and checked off the
    engine thread, like `program_class` and `ttft_slo_seconds` (the call's first-token
    deadline, see scheduler.deadlines.check_ttft_slo)."""

    program_id: str | None
    call_id: str
    prompt: list[int]
    params: SamplingParams
    tenant: str | None = None
    thread_id: str | None = None
    expected_tool_seconds: float | None = None
    start_unknown: bool = False
    program_class: str | None = None
    program_service: float | None = None  # a trusted router's priority value
    ttft_slo_seconds: float | None = None


def adder(request: CallRequest) -> Callable[[LLMEngine], str]:
    """`add(engine) -> call_id` for EngineLoop.submit (raises request errors)."""

    def add(engine: LLMEngine) -> str:
        program_id = request.program_id
        if program_id is not None and request.start_unknown:
            try:
                engine.get_program(program_id)
            except UnknownProgramError:
                engine.tokenize_prompt(request.prompt)  # a bad prompt starts no program
                engine.start_program(program_id, request.tenant,
                                     program_class=request.program_class)
        return engine.add_call(program_id, request.prompt, request.params, request.thread_id,
                               request.call_id,
                               tenant=request.tenant if program_id is None else None,
                               expected_tool_seconds=request.expected_tool_seconds,
                               program_service=request.program_service,
                               ttft_slo_seconds=request.ttft_slo_seconds)

    return add

