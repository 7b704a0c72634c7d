"""Which program the HTTP door runs a stored Responses chain in, exactly, on a scripted backend
(the door's code is the same over one engine and over a router): the programs each request
submitted to, in order, as the backend refuses them with typed errors. A response that
continues nothing is a one-call program; its first continuation starts the chain's program
and records it on the response it continues; a chain program that ended (its id recently
ended, or unknown) is replaced once; a program cap makes the call a one-call program; a full
waiting queue is the client's 429 with no second submission and nothing stored. Against a
real engine: tests/server/test_http_responses_stored.py."""

from __future__ import annotations

from typing import AsyncIterator

import pytest
from fastapi.testclient import TestClient

from engine import CompletionOutput
from engine.errors import ProgramExistsError, ProgramLimitError, UnknownProgramError
from server.call_stream import StreamFinal
from server.calls import CallRequest
from server.errors import QueueFullError
from server.openai_app import build_app
from server.prompts import PromptTokenizer
from server.response_store import ResponseLimits, ResponseStore

PROMPT = [1, 2, 3]  # every prompt's token ids


class Codec:
    """Every prompt is PROMPT."""

    def tokenize_prompt(self, prompt) -> list[int]:
        return list(PROMPT)


class Answered:
    """A call that finished at once with the text "ok"."""

    def __init__(self, call: CallRequest) -> None:
        self.call_id = call.call_id
        self.completion = CompletionOutput(call.call_id, call.prompt, [4], "ok", "stop", 0, 0,
                                           0.0, 0.0, 0.0, None, 0.0)

    async def __aiter__(self) -> AsyncIterator[StreamFinal]:
        yield StreamFinal(self.completion)

    def cancel(self) -> None:
        pass


class ScriptedBackend:
    """Refuses the next submissions with `refusals`, in order, then answers them
    (`Answered`); `programs` are the programs submitted to, refused or not, in order."""

    def __init__(self) -> None:
        self.refusals: list[Exception] = []
        self.programs: list[str | None] = []

    def unavailable(self) -> str | None:
        return None

    async def submit(self, ns, call: CallRequest, headers) -> Answered:
        self.programs.append(call.program_id)
        if self.refusals:
            raise self.refusals.pop(0)
        return Answered(call)


@pytest.fixture
def door():
    backend = ScriptedBackend()
    store = ResponseStore(ResponseLimits(), default_ttl=600.0)
    app = build_app(backend, PromptTokenizer(Codec()), None, "tiny", 64, store)
    with TestClient(app) as client:
        yield backend, store, client


def respond(client: TestClient, **body) -> dict:
    answer = client.post("/v1/responses", json={"input": "hi", **body})
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_the_first_continuation_starts_the_chains_program_later_ones_join_it(door):
    backend, _, client = door
    first = respond(client)
    second = respond(client, previous_response_id=first["id"])
    third = respond(client, previous_response_id=second["id"])
    fork = respond(client, previous_response_id=first["id"])
    program = backend.programs[1]
    assert program.startswith("prog-")
    assert backend.programs == [None, program, program, program]
    assert [r["program_id"] for r in (first, second, third, fork)] == \
        [None, program, program, program]


@pytest.mark.parametrize("ended", [ProgramExistsError, UnknownProgramError])
def test_a_chain_program_that_ended_is_replaced_for_the_chain(door, ended):
    backend, _, client = door
    first = respond(client)
    second = respond(client, previous_response_id=first["id"])
    gone = backend.programs[1]
    backend.refusals = [ended(gone)]
    third = respond(client, previous_response_id=first["id"])
    new = backend.programs[3]
    assert new.startswith("prog-") and new != gone
    assert backend.programs == [None, gone, gone, new] and third["program_id"] == new
    respond(client, previous_response_id=first["id"])  # the fork's program is the new one
    respond(client, previous_response_id=second["id"])  # second's is still the ended one
    assert backend.programs[4:] == [new, gone]


def test_past_a_program_cap_the_call_is_a_one_call_program_and_the_chain_keeps_its_id(door):
    backend, store, client = door
    first = respond(client)
    backend.refusals = [ProgramLimitError("max_programs_per_tenant: 3 programs without a "
                                          "tenant are active, the limit is 3")]
    second = respond(client, previous_response_id=first["id"])
    program = backend.programs[1]
    assert backend.programs == [None, program, None] and second["program_id"] is None
    assert store.get(None, second["id"]).response == second  # stored
    respond(client, previous_response_id=second["id"])  # under the cap again: it starts
    assert backend.programs[3] == program


def test_a_full_waiting_queue_is_the_clients_429_with_nothing_stored(door):
    backend, store, client = door
    first = respond(client)
    backend.refusals = [QueueFullError("max_waiting: the waiting queue is full (1 calls)")]
    answer = client.post("/v1/responses", json={"input": "hi",
                                                "previous_response_id": first["id"]})
    assert (answer.status_code, answer.json()["error"]["message"]) == (
        429, "max_waiting: the waiting queue is full (1 calls)")
    assert backend.programs[0] is None and len(backend.programs) == 2  # no second try
    assert len(store) == 1
