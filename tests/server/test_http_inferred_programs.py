"""`--infer-programs` on the HTTP door (the openai SDK, the tiny model, two tenants): a chat
whose messages extend an earlier chat of its tenant joins that chat's program (the
response's `program_id`, one record of its calls), in whatever JSON spelling the history
comes back; forks of one conversation run as parallel calls of that program; another
conversation, another tenant, a completions prompt and an explicit id do not join; a
program its client ended is started afresh; n > 1 keeps its own program when nothing is
found. The router's door does the same, and the flag needs an HTTP port."""

from __future__ import annotations

import json
import urllib.request

import openai
import pytest
from grpc_helpers import start, wait_idle
from router_helpers import router_over

from scheduler.placement import make_placement
from server.app import ServeOptions
from server.router.app import RouterOptions

TOKENS = {"tok-a": "team-a", "tok-b": "team-b"}
SYSTEM = {"role": "system", "content": "w20 w21 w22"}
GREEDY = {"temperature": 0, "max_tokens": 4, "extra_body": {"ignore_eos": True}}


@pytest.fixture(scope="module")
def server(tiny_llama_dir):
    running = start(tiny_llama_dir, port=None, http_port=0, served_model_name="tiny",
                    infer_programs=True, auth_tokens=TOKENS)
    yield running
    running.stop(grace=0)


def sdk(address: str, token: str = "tok-a") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"http://{address}/v1", api_key=token, max_retries=0)


def chat(client: openai.OpenAI, messages: list[dict], **kwargs) -> tuple[str, dict]:
    """(the response's program_id, its reply as the next request's assistant message)."""
    response = client.chat.completions.create(model="tiny", messages=messages,
                                              **{**GREEDY, **kwargs})
    reply = {"role": "assistant", "content": response.choices[0].message.content}
    return response.model_extra["program_id"], reply


def program(address: str, program_id: str, token: str = "tok-a", action: str = "") -> dict:
    request = urllib.request.Request(f"http://{address}/v1/programs/{program_id}{action}",
                                     method="POST" if action else "GET",
                                     headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request) as response:
        return json.loads(response.read())


def user(text: str) -> dict:
    return {"role": "user", "content": text}


def test_a_chat_extending_an_earlier_one_joins_its_program(server):
    address = server.http_address
    with sdk(address) as client:
        first, reply = chat(client, [SYSTEM, user("w30 w31")])
        second, _ = chat(client, [SYSTEM, user("w30 w31"), reply, user("w40")])
        parts = {"role": "assistant", "content": [{"type": "text", "text": reply["content"]}]}
        third, _ = chat(client, [SYSTEM, user("w30 w31"), parts, user("w41")])
    assert first.startswith("prog-") and second == third == first
    record = program(address, first)
    assert (record["state"], record["num_calls"], record["generated_tokens"]) == (
        "active", 3, 12)
    assert program(address, first, action=":end")["state"] == "completed"
    wait_idle(server)


def test_forks_of_one_conversation_run_as_parallel_calls_of_its_program(server):
    address = server.http_address
    with sdk(address) as client:
        root, reply = chat(client, [SYSTEM, user("w32")])
        branches = [client.chat.completions.create(  # max_tokens: the rest of the context
            model="tiny", messages=[SYSTEM, user("w32"), reply, user(f"w5{i}")], stream=True,
            extra_body={"ignore_eos": True}) for i in range(2)]
        record = program(address, root)
        for branch in branches:
            branch.close()
    assert (record["num_calls"], len(record["active_calls"])) == (3, 2)
    program(address, root, action=":end")
    wait_idle(server)


def test_another_conversation_and_another_tenant_get_programs_of_their_own(server):
    address = server.http_address
    with sdk(address) as team_a, sdk(address, "tok-b") as team_b:
        first, reply = chat(team_a, [SYSTEM, user("w33")])
        other, _ = chat(team_a, [SYSTEM, user("w34"), reply, user("w40")])
        theirs, _ = chat(team_b, [SYSTEM, user("w33"), reply, user("w40")])
    assert len({first, other, theirs}) == 3
    assert program(address, first)["num_calls"] == 1
    assert program(address, theirs, "tok-b")["num_calls"] == 1
    for program_id, token in ((first, "tok-a"), (other, "tok-a"), (theirs, "tok-b")):
        program(address, program_id, token, ":end")


def test_explicit_ids_win_and_completions_and_fresh_n_choices_infer_nothing(server):
    address = server.http_address
    active = lambda: server.engine_loop.call(  # noqa: E731
        lambda engine: engine.stats().load.programs_active)
    with sdk(address) as client:
        first, reply = chat(client, [SYSTEM, user("w35")])
        named, _ = chat(client, [SYSTEM, user("w35"), reply, user("w40")],
                        extra_headers={"X-Program-Id": "mine"})
        completion = client.completions.create(model="tiny", prompt="w35 w36", **GREEDY)
        before = active()
        fresh_n = client.chat.completions.create(model="tiny", messages=[user("w37")], n=2,
                                                 **GREEDY)
        after = active()
        joined_n = client.chat.completions.create(
            model="tiny", messages=[SYSTEM, user("w35"), reply, user("w41")], n=2, **GREEDY)
    assert named == "mine" and program(address, "mine")["num_calls"] == 1
    assert completion.model_extra["program_id"] == "" == fresh_n.model_extra["program_id"]
    assert after == before  # the n choices' own program ended with the request
    assert joined_n.model_extra["program_id"] == first
    assert program(address, first)["num_calls"] == 3
    for program_id in (first, "mine"):
        program(address, program_id, action=":end")


def test_a_program_its_client_ended_is_started_afresh(server):
    address = server.http_address
    with sdk(address) as client:
        first, reply = chat(client, [SYSTEM, user("w38")])
        program(address, first, action=":end")
        history = [SYSTEM, user("w38"), reply, user("w40")]
        fresh, reply = chat(client, history)
        again, _ = chat(client, [*history, reply, user("w41")])
    assert fresh not in ("", first) and again == fresh
    record = program(address, fresh)
    assert (record["state"], record["num_calls"]) == ("active", 2)
    program(address, fresh, action=":end")


def test_the_routers_door_infers_programs_too(replicas, tiny_llama_dir):
    router = router_over(replicas, make_placement("round_robin"), model=tiny_llama_dir,
                         http_port=0, served_model_name="tiny", infer_programs=True)
    try:
        with sdk(router.http_address) as client:
            first, reply = chat(client, [SYSTEM, user("w39")])
            second, _ = chat(client, [SYSTEM, user("w39"), reply, user("w40")])
        assert second == first and first.startswith("prog-")
        assert program(router.http_address, first)["num_calls"] == 2
    finally:
        router.stop(grace=0)


def test_the_flag_needs_an_http_port():
    for make in (lambda: ServeOptions(port=0, infer_programs=True),
                 lambda: RouterOptions(replicas=("127.0.0.1:1",), infer_programs=True)):
        with pytest.raises(ValueError, match="infer_programs: .* needs http_port"):
            make()


def test_a_stateless_responses_client_resending_its_history_keeps_one_program(server):
    """The Agents SDK's default: every turn re-sends the whole conversation, no
    previous_response_id; the turns join one program, whose id each response reports."""
    address = server.http_address
    with sdk(address) as client:
        turn = [{"role": "user", "content": "w33 w34"}]
        first = client.responses.create(model="tiny", input=turn, max_output_tokens=4,
                                        temperature=0, extra_body={"ignore_eos": True})
        turn += [{"role": "assistant", "content": first.output_text},
                 {"role": "user", "content": "w35"}]
        second = client.responses.create(model="tiny", input=turn, max_output_tokens=4,
                                         temperature=0, extra_body={"ignore_eos": True})
    program_id = first.model_extra["program_id"]
    assert program_id.startswith("prog-") and second.model_extra["program_id"] == program_id
    assert program(address, program_id)["num_calls"] == 2
    assert program(address, program_id, action=":end")["state"] == "completed"
    wait_idle(server)
