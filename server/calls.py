"""The engine-thread half of adding a call, shared by the gRPC and HTTP front doors:
ownership checks, an implicitly started program (HTTP), then `add_call`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from engine import ChatPrompt, LLMEngine, SamplingParams
from engine.errors import DuplicateCallError, ProgramExistsError, UnknownProgramError
from server.errors import AlreadyExistsError, PermissionDeniedError

ID_ATTEMPTS = 8  # tries for a call whose engine-derived id a client's id has taken


def check_owner(owner: str | None, caller: str | None, what: str) -> None:
    """With auth on (`caller` set), only the owning tenant may touch a program or call."""
    if caller is not None and owner != caller:
        raise PermissionDeniedError(f"{what} belongs to another tenant")


@dataclass(frozen=True)
class CallRequest:
    """A call as a front door received it. `program_id=None`: a one-call program of
    `tenant`; `start_unknown`: a named program that does not exist is started for `tenant`
    (HTTP clients cannot call StartProgram). `caller` is the authenticated tenant (None
    with auth off)."""

    program_id: str | None
    prompt: str | list[int] | ChatPrompt
    params: SamplingParams
    caller: str | None
    tenant: str | None = None
    thread_id: str | None = None
    call_id: str | None = None
    expected_tool_seconds: float | None = None
    start_unknown: bool = False


def adder(request: CallRequest) -> Callable[[LLMEngine], str]:
    """`add(engine) -> call_id` for EngineLoop.submit (raises request errors)."""
    program_id, call_id = request.program_id, request.call_id

    def add(engine: LLMEngine) -> str:
        if program_id is not None:
            ensure_program(engine, program_id, request)
        for _ in range(ID_ATTEMPTS):
            try:
                return engine.add_call(program_id, request.prompt, request.params,
                                       request.thread_id, call_id,
                                       tenant=request.tenant if program_id is None else None,
                                       expected_tool_seconds=request.expected_tool_seconds)
            except DuplicateCallError:
                if call_id is not None:
                    raise
            except ProgramExistsError:
                # Without a program, a call gets a one-call program whose id the engine
                # derives from the call; a client-proposed program may hold that id.
                if program_id is not None:
                    raise
        raise AlreadyExistsError("call_id: could not find a free id for this call")

    return add


def ensure_program(engine: LLMEngine, program_id: str, request: CallRequest) -> None:
    """Check the caller owns `program_id`; start it first when it is unknown and the
    request may start it (an ended program's id is not reused: ProgramExistsError)."""
    try:
        owner = engine.get_program(program_id).tenant
    except UnknownProgramError:
        if not request.start_unknown:
            raise
        engine.tokenize_prompt(request.prompt)  # a bad prompt starts no program
        engine.start_program(program_id, request.tenant)
        return
    check_owner(owner, request.caller, f"program_id {program_id!r}")
