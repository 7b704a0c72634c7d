"""Stateful Responses with the official `openai` SDK, on the model that answers every chat with
one hermes-style tool call (tests/tool_call_model.py), so prompt lengths are exact: `store`
and `previous_response_id` (the stored conversation, then its output, then the new input;
instructions not carried), GET and DELETE /v1/responses/{id}, a chain of responses as one
program started by its first continuation (counted in the engine's active programs), the
fallbacks of a chain's program (ended: a new one; past the cap: a one-call program; a full
waiting queue is the client's 429), and tenants kept apart (auth on: each test is a tenant of
its own). One seat and one waiting call: the requests here run one at a time. The store's
bounds themselves: tests/server/test_response_store.py."""

from __future__ import annotations

import openai
import pytest
from grpc_helpers import slowed, start, wait_idle
from tool_call_model import CALL_TEXT, CALL_WORDS

from server.response_store import ResponseLimits
from test_http_responses import TOOLS
from test_http_tools import model_dir  # noqa: F401  (fixture: the tool-call model)

TENANTS = ("alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy",
           "mallory", "oscar")
PER_TENANT = 3  # stored responses per tenant, and active programs per tenant
CALL = len(CALL_WORDS)  # the words of the model's one answer
NOT_STORED = ("no stored response has this id (it is unknown, expired, deleted or another "
              "tenant's)")


@pytest.fixture(scope="module")
def server(model_dir):  # noqa: F811
    running = start(model_dir, port=None, http_port=0, served_model_name="tiny",
                    tool_call_parser="hermes", auth_tokens={f"tok-{t}": t for t in TENANTS},
                    responses=ResponseLimits(max_per_tenant=PER_TENANT),
                    max_programs_per_tenant=PER_TENANT, max_num_seqs=1, max_waiting=1)
    yield running
    running.stop(grace=0)


@pytest.fixture(scope="module")
def clients(server):
    """Each tenant's openai client."""
    made = {t: openai.OpenAI(base_url=f"http://{server.http_address}/v1",
                             api_key=f"tok-{t}", max_retries=0) for t in TENANTS}
    yield made
    for client in made.values():
        client.close()


def create(client, input="hello", **body):
    return client.responses.create(model="tiny", input=input,
                                   **{"temperature": 0, "max_output_tokens": 32, **body})


def program_of(response) -> str | None:
    return response.model_extra["program_id"]


def program_record(client, program_id: str) -> dict:
    return client.get(f"/programs/{program_id}", cast_to=object)


def programs(server) -> int:
    """The engine's active programs (one-call programs included), once no call is left."""
    wait_idle(server)
    return server.engine_loop.call(lambda engine: engine.stats().load.programs_active)


def refused(call) -> openai.APIStatusError:
    with pytest.raises(openai.APIStatusError) as info:
        call()
    return info.value


def test_a_single_stored_response_leaves_no_program(server, clients):
    alice = clients["alice"]
    before = programs(server)
    first = create(alice)
    assert (first.store, program_of(first)) == (True, None)  # a one-call program
    assert alice.responses.retrieve(first.id).model_dump() == first.model_dump()
    assert programs(server) == before


def test_the_second_response_starts_the_chains_program_the_third_and_a_fork_join_it(
        server, clients):
    alice = clients["alice"]
    first = create(alice)
    before = programs(server)
    second = create(alice, previous_response_id=first.id)
    program = program_of(second)
    assert program.startswith("prog-") and programs(server) == before + 1
    third = create(alice, previous_response_id=second.id)
    fork = create(alice, previous_response_id=first.id)
    assert (program_of(third), program_of(fork)) == (program, program)
    assert programs(server) == before + 1
    # hello go | hello CALL hello go | hello CALL hello CALL hello go | as the second
    assert [r.usage.input_tokens for r in (first, second, third, fork)] == \
        [2, 3 + CALL, 4 + 2 * CALL, 3 + CALL]
    assert third.output_text == CALL_TEXT
    assert (first.previous_response_id, second.previous_response_id,
            third.previous_response_id) == (None, first.id, second.id)
    record = program_record(alice, program)
    # the first response ran before the program: its service is not in the record
    assert (record["num_calls"], record["state"], record["tenant"]) == (3, "active", "alice")


def test_a_stored_response_reads_back_as_sent_and_deletes(clients):
    bob = clients["bob"]
    response = create(bob)
    assert response.store is True
    assert bob.responses.retrieve(response.id).model_dump() == response.model_dump()
    assert bob.delete(f"/responses/{response.id}", cast_to=object) == {
        "id": response.id, "object": "response", "deleted": True}
    for call in (lambda: bob.responses.retrieve(response.id),
                 lambda: bob.delete(f"/responses/{response.id}", cast_to=object)):
        error = refused(call)
        assert (error.status_code, error.body["message"]) == (404, NOT_STORED)
    error = refused(lambda: create(bob, previous_response_id=response.id))
    assert (error.status_code, error.body["param"]) == (400, "previous_response_id")


def test_another_tenants_response_is_as_unknown_as_a_missing_one(clients):
    alice, carol = clients["alice"], clients["carol"]
    theirs = create(carol)
    for response_id in (theirs.id, "resp_call-0000000000000000"):
        error = refused(lambda: create(alice, previous_response_id=response_id))
        assert (error.status_code, error.body["param"], error.body["message"]) == (
            400, "previous_response_id", f"previous_response_id: {NOT_STORED}")
        for call in (lambda: alice.responses.retrieve(response_id),
                     lambda: alice.delete(f"/responses/{response_id}", cast_to=object)):
            error = refused(call)
            assert (error.status_code, error.body["message"]) == (404, NOT_STORED)
    assert carol.responses.retrieve(theirs.id).id == theirs.id  # still there, whole


def test_instructions_are_not_carried_over(clients):
    dave = clients["dave"]
    first = create(dave, instructions="sunny")
    assert first.usage.input_tokens == 3  # sunny hello go
    assert create(dave, previous_response_id=first.id).usage.input_tokens == 3 + CALL
    assert create(dave, previous_response_id=first.id,
                  instructions="sunny").usage.input_tokens == 4 + CALL


def test_a_function_call_continues_with_its_output(clients):
    erin = clients["erin"]
    first = create(erin, tools=TOOLS)
    (call,) = first.output
    answer = [{"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}]
    second = create(erin, answer, tools=TOOLS, previous_response_id=first.id)
    assert second.usage.input_tokens == 4  # tools hello (the call: no content) sunny go
    assert second.output[0].type == "function_call"


def test_a_streamed_or_incomplete_response_is_stored_once_final(clients):
    frank = clients["frank"]
    events = list(create(frank, stream=True))
    completed = events[-1].response
    assert events[-1].type == "response.completed" and completed.store is True
    assert program_of(completed) is None
    assert frank.responses.retrieve(completed.id).model_dump() == completed.model_dump()
    cut = create(frank, previous_response_id=completed.id, max_output_tokens=2)
    assert cut.status == "incomplete"
    assert frank.responses.retrieve(cut.id).status == "incomplete"
    # hello CALL hello <the cut answer's two words> hello go
    last = create(frank, previous_response_id=cut.id, stream=True)
    final = list(last)[-1].response
    assert final.usage.input_tokens == 3 + CALL + 3
    assert program_of(cut).startswith("prog-") and program_of(final) == program_of(cut)
    assert frank.responses.retrieve(final.id).model_dump() == final.model_dump()


def test_store_false_keeps_nothing_and_runs_as_before(server, clients):
    grace = clients["grace"]
    before = programs(server)
    first = create(grace, store=False)
    assert (first.store, program_of(first)) == (False, None)  # a one-call program
    assert refused(lambda: grace.responses.retrieve(first.id)).status_code == 404
    assert refused(lambda: create(grace, previous_response_id=first.id)).status_code == 400
    stored = create(grace)
    assert programs(server) == before
    unstored = create(grace, previous_response_id=stored.id, store=False)
    assert program_of(unstored).startswith("prog-")  # it starts the chain's program
    assert refused(lambda: grace.responses.retrieve(unstored.id)).status_code == 404
    fork = create(grace, previous_response_id=stored.id)
    assert program_of(fork) == program_of(unstored) and programs(server) == before + 1


def test_a_fork_and_a_named_program(clients):
    heidi = clients["heidi"]
    root = create(heidi)
    forks = [create(heidi, previous_response_id=root.id) for _ in range(2)]
    assert program_of(forks[0]).startswith("prog-")
    assert program_of(forks[1]) == program_of(forks[0])
    assert program_record(heidi, program_of(forks[0]))["num_calls"] == 2
    named = create(heidi, previous_response_id=root.id,
                   extra_headers={"X-Program-Id": "agent-1"})
    assert program_of(named) == "agent-1"  # the client's program wins over the chain
    assert program_of(create(heidi, previous_response_id=named.id)) == "agent-1"
    assert program_record(heidi, "agent-1")["num_calls"] == 2
    alone = create(heidi, extra_headers={"X-Program-Id": "agent-2"})
    assert program_of(alone) == "agent-2"  # named, even continuing nothing


def test_the_tenants_n_plus_first_response_evicts_its_oldest(clients):
    ivan = clients["ivan"]
    chain = [create(ivan)]
    for _ in range(PER_TENANT):
        chain.append(create(ivan, previous_response_id=chain[-1].id))
    assert refused(lambda: ivan.responses.retrieve(chain[0].id)).status_code == 404
    assert [ivan.responses.retrieve(r.id).id for r in chain[1:]] == [r.id for r in chain[1:]]


def test_a_chain_whose_program_ended_goes_on_in_a_new_one(server, clients):
    judy = clients["judy"]
    first = create(judy)
    second = create(judy, previous_response_id=first.id)
    ended = judy.post(f"/programs/{program_of(second)}:end", body={}, cast_to=object)
    assert ended["state"] == "completed"
    before = programs(server)
    third = create(judy, previous_response_id=second.id)
    assert third.usage.input_tokens == 4 + 2 * CALL  # the conversation is whole
    assert program_of(third).startswith("prog-") and program_of(third) != program_of(second)
    assert programs(server) == before + 1
    fourth = create(judy, previous_response_id=second.id)  # its program is the new one now
    assert program_of(fourth) == program_of(third)
    assert program_record(judy, program_of(third))["num_calls"] == 2


def test_past_the_program_cap_a_continuation_runs_as_a_one_call_program(server, clients):
    mallory = clients["mallory"]
    first = create(mallory)
    for i in range(PER_TENANT):  # the tenant's cap, in programs the client names
        create(mallory, store=False, extra_headers={"X-Program-Id": f"agent-{i}"})
    before = programs(server)
    second = create(mallory, previous_response_id=first.id)
    assert (second.usage.input_tokens, program_of(second), second.store) == \
        (3 + CALL, None, True)
    assert mallory.responses.retrieve(second.id).id == second.id
    assert programs(server) == before
    error = refused(lambda: create(mallory, store=False,
                                   extra_headers={"X-Program-Id": "one-more"}))
    assert error.status_code == 429  # a program the client names is refused, as before
    mallory.post("/programs/agent-0:end", body={}, cast_to=object)
    third = create(mallory, previous_response_id=second.id)
    fork = create(mallory, previous_response_id=first.id)
    assert program_of(third).startswith("prog-") and program_of(fork) == program_of(third)
    assert programs(server) == before  # the chain's program in agent-0's place


def test_a_full_waiting_queue_is_a_429_and_nothing_is_stored(server, clients):
    oscar = clients["oscar"]
    kept = [create(oscar) for _ in range(PER_TENANT)]  # the tenant's whole store
    before = programs(server)

    def load() -> tuple[int, int]:
        stats = server.engine_loop.call(lambda engine: engine.stats().load)
        return stats.calls_running, stats.calls_waiting

    with slowed(server, 0.05):  # the long call's 240 steps take 12 s at least
        running = oscar.completions.create(model="tiny", prompt="hello", max_tokens=240,
                                           temperature=0, stream=True,
                                           extra_body={"ignore_eos": True})
        next(iter(running))
        waiting = oscar.completions.create(model="tiny", prompt="hello", max_tokens=4,
                                           temperature=0, stream=True)
        assert load() == (1, 1)
        error = refused(lambda: create(oscar, previous_response_id=kept[0].id))
        assert (error.status_code, error.body["type"]) == (429, "rate_limit_error")
        assert "waiting queue is full" in error.body["message"]
        assert load() == (1, 1), "the long call finished too early: the queue was not full"
        running.close()
    assert len(list(waiting)) > 1
    # storing one more would have evicted the tenant's oldest; no program was started
    assert [oscar.responses.retrieve(r.id).id for r in kept] == [r.id for r in kept]
    assert programs(server) == before
