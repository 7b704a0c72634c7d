"""Stateful Responses with the official `openai` SDK, on the model that answers every chat with
one hermes-style tool call (tests/tool_call_model.py), so prompt lengths are exact: `store`
and `previous_response_id` (the stored conversation, then its output, then the new input;
instructions not carried), GET and DELETE /v1/responses/{id}, a chain of responses as one
program, and tenants kept apart (auth on: each test is a tenant of its own). The store's
bounds themselves: tests/server/test_response_store.py."""

from __future__ import annotations

import openai
import pytest
from grpc_helpers import start
from tool_call_model import CALL_TEXT, CALL_WORDS

from server.response_store import ResponseLimits
from test_http_responses import TOOLS
from test_http_tools import model_dir  # noqa: F401  (fixture: the tool-call model)

TENANTS = ("alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy",
           "mallory")
PER_TENANT = 3  # stored responses per tenant, and active programs per tenant
CALL = len(CALL_WORDS)  # the words of the model's one answer
NOT_STORED = ("no stored response has this id (it is unknown, expired, deleted or another "
              "tenant's)")


@pytest.fixture(scope="module")
def server(model_dir):  # noqa: F811
    running = start(model_dir, port=None, http_port=0, served_model_name="tiny",
                    tool_call_parser="hermes", auth_tokens={f"tok-{t}": t for t in TENANTS},
                    responses=ResponseLimits(max_per_tenant=PER_TENANT),
                    max_programs_per_tenant=PER_TENANT)
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


def refused(call) -> openai.APIStatusError:
    with pytest.raises(openai.APIStatusError) as info:
        call()
    return info.value


def test_a_chain_of_three_is_one_program_each_prompt_the_whole_conversation(clients):
    alice = clients["alice"]
    first = create(alice)
    second = create(alice, previous_response_id=first.id)
    third = create(alice, previous_response_id=second.id)
    # hello go | hello CALL hello go | hello CALL hello CALL hello go
    assert [r.usage.input_tokens for r in (first, second, third)] == \
        [2, 3 + CALL, 4 + 2 * CALL]
    assert third.output_text == CALL_TEXT
    assert (first.previous_response_id, second.previous_response_id,
            third.previous_response_id) == (None, first.id, second.id)
    program = program_of(first)
    assert program.startswith("prog-") and program_of(second) == program_of(third) == program
    record = program_record(alice, program)
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
    assert frank.responses.retrieve(completed.id).model_dump() == completed.model_dump()
    cut = create(frank, previous_response_id=completed.id, max_output_tokens=2)
    assert cut.status == "incomplete"
    assert frank.responses.retrieve(cut.id).status == "incomplete"
    # hello CALL hello <the cut answer's two words> hello go
    assert create(frank, previous_response_id=cut.id).usage.input_tokens == 3 + CALL + 3
    assert len({program_of(completed), program_of(cut)}) == 1


def test_store_false_keeps_nothing_and_runs_as_before(clients):
    grace = clients["grace"]
    first = create(grace, store=False)
    assert (first.store, program_of(first)) == (False, None)  # a one-call program
    assert refused(lambda: grace.responses.retrieve(first.id)).status_code == 404
    assert refused(lambda: create(grace, previous_response_id=first.id)).status_code == 400
    stored = create(grace)
    unstored = create(grace, previous_response_id=stored.id, store=False)
    assert program_of(unstored) == program_of(stored)  # a continuation joins the chain
    assert refused(lambda: grace.responses.retrieve(unstored.id)).status_code == 404


def test_a_fork_and_a_named_program(clients):
    heidi = clients["heidi"]
    root = create(heidi)
    forks = [create(heidi, previous_response_id=root.id) for _ in range(2)]
    assert {program_of(r) for r in forks} == {program_of(root)}
    assert program_record(heidi, program_of(root))["num_calls"] == 3
    named = create(heidi, previous_response_id=root.id,
                   extra_headers={"X-Program-Id": "agent-1"})
    assert program_of(named) == "agent-1"  # the client's program wins over the chain
    assert program_of(create(heidi, previous_response_id=named.id)) == "agent-1"
    assert program_record(heidi, "agent-1")["num_calls"] == 2


def test_the_tenants_n_plus_first_response_evicts_its_oldest(clients):
    ivan = clients["ivan"]
    chain = [create(ivan)]
    for _ in range(PER_TENANT):
        chain.append(create(ivan, previous_response_id=chain[-1].id))
    assert refused(lambda: ivan.responses.retrieve(chain[0].id)).status_code == 404
    assert [ivan.responses.retrieve(r.id).id for r in chain[1:]] == [r.id for r in chain[1:]]


def test_a_chain_whose_program_ended_goes_on_in_a_new_one(clients):
    judy = clients["judy"]
    first = create(judy)
    ended = judy.post(f"/programs/{program_of(first)}:end", body={}, cast_to=object)
    assert ended["state"] == "completed"
    second = create(judy, previous_response_id=first.id)
    assert second.usage.input_tokens == 3 + CALL  # the conversation is whole
    assert program_of(second).startswith("prog-") and program_of(second) != program_of(first)
    assert program_record(judy, program_of(second))["num_calls"] == 1


def test_past_the_program_cap_a_new_chain_runs_as_a_one_call_program(clients):
    mallory = clients["mallory"]
    chains = [create(mallory) for _ in range(PER_TENANT)]
    assert len({program_of(r) for r in chains}) == PER_TENANT  # the tenant's cap
    over = create(mallory)
    assert (program_of(over), over.store) == (None, True)
    assert mallory.responses.retrieve(over.id).id == over.id
    after = create(mallory, previous_response_id=over.id)
    assert (after.usage.input_tokens, program_of(after)) == (3 + CALL, None)
    error = refused(lambda: create(mallory, extra_headers={"X-Program-Id": "one-more"}))
    assert error.status_code == 429  # a program the client names is refused, as before
