"""Bearer-token auth: the token names the tenant, which owns what it starts; each tenant's
ids live in its own namespace, so another tenant's program or call is simply not found (and
the same id can be used by both); tokens files."""

from __future__ import annotations

import grpc
import pytest
from grpc_helpers import (assert_clean, collect, free_blocks, gen_request, rpc_error, start,
                          wait_idle)

from server import agentix_pb2 as pb
from server import agentix_pb2_grpc
from server.auth import AuthError, TokenAuth, load_tokens, parse_tokens

TOKENS = {"tok-a": "team-a", "tok-b": "team-b"}


def bearer(token: str) -> list[tuple[str, str]]:
    return [("authorization", f"Bearer {token}")]


A, B = bearer("tok-a"), bearer("tok-b")


@pytest.fixture(scope="module")
def auth_server(tiny_llama_dir):
    server = start(tiny_llama_dir, auth_tokens=TOKENS)
    yield server
    server.stop(grace=0)


@pytest.fixture(scope="module")
def auth_stub(auth_server):
    with grpc.insecure_channel(auth_server.address) as channel:
        yield agentix_pb2_grpc.AgentixStub(channel)


def test_missing_or_unknown_token_is_unauthenticated(auth_stub):
    calls = ((auth_stub.StartProgram, pb.StartProgramRequest()),
             (auth_stub.Generate, gen_request([1, 5])),
             (auth_stub.GetProgram, pb.GetProgramRequest(program_id="x")),
             (auth_stub.EndProgram, pb.EndProgramRequest(program_id="x")),
             (auth_stub.Abort, pb.AbortRequest(call_id="x")),
             (auth_stub.ModelInfo, pb.ModelInfoRequest()))
    for metadata in (None, bearer("wrong"), [("authorization", "tok-a")],
                     [("authorization", "Basic tok-a")]):
        for call, request_ in calls:
            err = rpc_error(call, request_, metadata=metadata)
            assert err.code() == grpc.StatusCode.UNAUTHENTICATED, (call, metadata)
            assert "authorization" in err.details()


def test_tenants_own_their_programs_and_calls(auth_server, auth_stub):
    free = free_blocks(auth_server)
    # the token's tenant wins over the request's
    pid = auth_stub.StartProgram(pb.StartProgramRequest(tenant="team-b"), metadata=A).program_id
    info = auth_stub.GetProgram(pb.GetProgramRequest(program_id=pid), metadata=A)
    assert info.tenant == "team-a"

    running = auth_stub.Generate(gen_request([1, 5, 6], pid, max_tokens=200, ignore_eos=True,
                                             call_id="a-call"), metadata=A)
    next(running)
    denied = ((auth_stub.GetProgram, pb.GetProgramRequest(program_id=pid)),
              (auth_stub.Generate, gen_request([1, 5], pid)),
              (auth_stub.EndProgram, pb.EndProgramRequest(program_id=pid)),
              (auth_stub.Abort, pb.AbortRequest(call_id="a-call")))
    for call, request_ in denied[:3]:  # exactly as for a program that does not exist
        err = rpc_error(call, request_, metadata=B)
        assert err.code() == grpc.StatusCode.NOT_FOUND, call
        assert err.details() == f"program_id {pid!r} is not an active program"
    assert not auth_stub.Abort(pb.AbortRequest(call_id="a-call"), metadata=B).aborted
    assert auth_stub.Abort(pb.AbortRequest(call_id="a-call"), metadata=A).aborted
    assert collect(running)[2].finish_reason == "abort"

    _, _, final = collect(auth_stub.Generate(gen_request([1, 5], pid, max_tokens=3), metadata=A))
    assert final.usage.completion_tokens >= 1
    ended = auth_stub.EndProgram(pb.EndProgramRequest(program_id=pid), metadata=A)
    # a recently ended program is still the owner's only
    err = rpc_error(auth_stub.EndProgram, pb.EndProgramRequest(program_id=pid), metadata=B)
    assert err.code() == grpc.StatusCode.NOT_FOUND
    assert auth_stub.EndProgram(pb.EndProgramRequest(program_id=pid), metadata=A) == ended
    assert_clean(auth_server, free)


def test_one_call_programs_get_the_token_tenant(auth_server, auth_stub):
    stream = auth_stub.Generate(gen_request([1, 5, 6], max_tokens=200, ignore_eos=True,
                                            call_id="b-solo"), metadata=B)
    next(stream)

    def tenant_of_call(engine):
        return engine.get_program(engine.calls["team-b/b-solo"].program_id).tenant

    assert auth_server.engine_loop.call(tenant_of_call) == "team-b"
    assert not auth_stub.Abort(pb.AbortRequest(call_id="b-solo"), metadata=A).aborted
    stream.cancel()


def test_tenants_cannot_take_or_block_each_others_ids(auth_server, auth_stub):
    """A pre-claims the program and call ids B is about to use: B's own calls still work."""
    wait_idle(auth_server)  # an earlier test's cancelled stream may still be freeing blocks
    squat = auth_stub.StartProgram(pb.StartProgramRequest(program_id="shared"), metadata=A)
    squatted = auth_stub.Generate(gen_request([1, 5], "shared", max_tokens=100,
                                              ignore_eos=True, call_id="c-1"), metadata=A)
    next(squatted)
    mine = auth_stub.StartProgram(pb.StartProgramRequest(program_id="shared"), metadata=B)
    assert squat.program_id == mine.program_id == "shared"
    ids, _, final = collect(auth_stub.Generate(gen_request([1, 5], "shared", max_tokens=3,
                                                           call_id="c-1"), metadata=B))
    assert len(ids) == 3 and final.finish_reason == "length"
    assert auth_stub.GetProgram(pb.GetProgramRequest(program_id="shared"),
                                metadata=B).tenant == "team-b"
    # Server-chosen ids are random, not a sequence another tenant could predict.
    first, second = (auth_stub.StartProgram(pb.StartProgramRequest(), metadata=B).program_id
                     for _ in range(2))
    assert first.startswith("prog-") and len(first) == 21 and first != second
    squatted.cancel()
    for pid, who in (("shared", A), ("shared", B), (first, B), (second, B)):
        auth_stub.EndProgram(pb.EndProgramRequest(program_id=pid), metadata=who)
    wait_idle(auth_server)


def test_token_file(tmp_path):
    path = tmp_path / "tokens"
    path.write_text("# token tenant\n\nabc team-a\n  def   team-b  # trailing comment\n")
    assert load_tokens(path) == {"abc": "team-a", "def": "team-b"}
    for text, where in (("abc\n", "tokens:1:"), ("abc team-a extra\n", "tokens:1:"),
                        ("abc a\nabc b\n", "tokens:2:"), ("# nothing\n", "tokens: no")):
        with pytest.raises(ValueError) as info:
            parse_tokens(text.splitlines(), "tokens")
        assert str(info.value).startswith(where)
        assert "abc" not in str(info.value)  # never echo a token


def test_token_lookup():
    """The scheme is case-insensitive and spaces around it are fine; two authorization
    headers are refused as ambiguous."""
    auth = TokenAuth({"s3cret": "team-a"})
    assert auth.authenticate([("authorization", "Bearer s3cret")]) == "team-a"
    assert auth.authenticate([("authorization", "bearer  s3cret ")]) == "team-a"
    for metadata, why in (([("authorization", "Bearer s3cre")], "unknown bearer token"),
                          ([("x-other", "Bearer s3cret")], "missing bearer token"),
                          (None, "missing bearer token"),
                          ([("authorization", "Bearer s3cret"), ("Authorization", "Bearer x")],
                           "more than one authorization header")):
        with pytest.raises(AuthError, match=why):
            auth.authenticate(metadata)
    with pytest.raises(ValueError):
        TokenAuth({})


def test_ambiguous_authorization_is_unauthenticated(auth_stub):
    err = rpc_error(auth_stub.ModelInfo, pb.ModelInfoRequest(),
                    metadata=[("authorization", "Bearer tok-a"),
                              ("authorization", "Bearer tok-b")])
    assert err.code() == grpc.StatusCode.UNAUTHENTICATED
    assert "more than one authorization header" in err.details()


def test_tenant_names_in_a_token_file_are_ids(tmp_path):
    for line, why in (("tok team/a", "must not contain '/'"), ("tok " + "t" * 129, "tenant")):
        with pytest.raises(ValueError, match=why):
            parse_tokens([line], "tokens")
