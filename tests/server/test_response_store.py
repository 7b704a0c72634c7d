"""The stored Responses' bounds (server/response_store.py), exact, on an injected clock: the
count per tenant and the bytes in all evict the least recently used first, a response too
large for the whole store is refused, a response expires `ttl` after its last use (the
program TTL unless set), tenants never see each other's, and a chain's program is recorded
on a response once, by its first continuation. `check()` after every step."""

from __future__ import annotations

import pytest

from server.response_store import ResponseLimits, ResponseStore, StoredResponse


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def stored(text: str = "x", program_id: str | None = "prog-1") -> StoredResponse:
    output = [{"type": "message", "role": "assistant",
               "content": [{"type": "output_text", "text": text}]}]
    return StoredResponse([{"role": "user", "content": "hello"}],
                          {"id": "resp", "output": output}, program_id)


SIZE = stored().size()  # every stored("x" or one other character) is this large


def make(max_per_tenant: int = 100, max_bytes: int = 1 << 20, ttl: float | None = None,
         default_ttl: float = 600.0) -> tuple[ResponseStore, Clock]:
    clock = Clock()
    return ResponseStore(ResponseLimits(max_per_tenant, max_bytes, ttl), default_ttl,
                         clock), clock


def kept(store: ResponseStore, tenant: str | None, *ids: str) -> list[str]:
    """Which of `ids` the tenant still has (reading them counts as a use)."""
    store.check()
    return [i for i in ids if store.get(tenant, i) is not None]


def test_a_stored_response_continues_from_its_conversation_then_its_output():
    response = stored("hi")
    assert response.continued() == [
        {"role": "user", "content": "hello"},
        {"type": "message", "role": "assistant",
         "content": [{"type": "output_text", "text": "hi"}]}]


def test_the_n_plus_first_response_of_a_tenant_evicts_its_oldest_only():
    store, _ = make(max_per_tenant=3)
    store.put("bob", "b1", stored())
    for i in range(1, 4):
        assert store.put("alice", f"a{i}", stored())
    store.check()
    assert store.put("alice", "a4", stored())
    assert kept(store, "alice", "a1", "a2", "a3", "a4") == ["a2", "a3", "a4"]
    assert kept(store, "bob", "b1") == ["b1"]  # another tenant's count is its own
    assert (len(store), store.num_bytes) == (4, 4 * SIZE)


def test_a_read_makes_a_response_the_most_recently_used():
    store, _ = make(max_per_tenant=2)
    store.put("alice", "a1", stored())
    store.put("alice", "a2", stored())
    assert store.get("alice", "a1") is not None
    store.put("alice", "a3", stored())
    assert kept(store, "alice", "a1", "a2", "a3") == ["a1", "a3"]


def test_past_the_byte_cap_the_least_recently_used_of_any_tenant_goes():
    store, _ = make(max_bytes=2 * SIZE)
    store.put("alice", "a1", stored())
    store.put("bob", "b1", stored())
    assert store.num_bytes == 2 * SIZE  # exactly full: nothing evicted
    store.check()
    store.put("bob", "b2", stored())
    assert kept(store, "alice", "a1") == []
    assert kept(store, "bob", "b1", "b2") == ["b1", "b2"]
    assert store.num_bytes == 2 * SIZE


def test_a_response_larger_than_the_store_is_refused_and_evicts_nothing():
    store, _ = make(max_bytes=SIZE)
    store.put("alice", "a1", stored())
    assert not store.put("alice", "big", stored("xy"))  # SIZE + 1
    assert kept(store, "alice", "a1", "big") == ["a1"]
    assert store.num_bytes == SIZE


def test_a_response_expires_ttl_after_its_last_use():
    store, clock = make(ttl=10.0)
    store.put("alice", "a1", stored())
    store.put("alice", "a2", stored())
    clock.now = 9.0
    assert store.get("alice", "a1") is not None  # used at 9: lives until 19
    clock.now = 10.0
    assert kept(store, "alice", "a2") == []  # last used at 0
    clock.now = 18.0
    assert kept(store, "alice", "a1") == ["a1"]  # used at 18 now
    clock.now = 28.0
    assert kept(store, "alice", "a1") == []
    assert (len(store), store.num_bytes) == (0, 0)


def test_the_ttl_is_the_program_ttl_unless_set():
    assert make(default_ttl=600.0)[0].ttl == 600.0
    assert make(ttl=30.0, default_ttl=600.0)[0].ttl == 30.0


def test_tenants_never_see_or_delete_each_others_responses():
    store, _ = make()
    store.put("alice", "r1", stored())
    assert store.get("bob", "r1") is None and store.get(None, "r1") is None
    assert not store.delete("bob", "r1")
    assert store.delete("alice", "r1")
    assert not store.delete("alice", "r1")
    assert kept(store, "alice", "r1") == []


def test_the_first_continuation_records_the_chains_program_later_ones_get_it():
    store, _ = make(max_per_tenant=2)
    store.put("alice", "a1", stored(program_id=None))
    assert store.chain_program("alice", "a1", "prog-2") == "prog-2"
    assert store.chain_program("alice", "a1", "prog-3") == "prog-2"
    assert store.get("alice", "a1").program_id == "prog-2"
    assert store.chain_program("bob", "a1", "prog-4") == "prog-4"  # not bob's: unrecorded
    assert store.get("bob", "a1") is None
    store.check()
    assert (len(store), store.num_bytes) == (1, SIZE)  # the size is the same


def test_an_ended_chain_program_is_replaced_once():
    store, _ = make()
    store.put("alice", "a1", stored(program_id="prog-1"))
    assert store.chain_program("alice", "a1", "prog-2", ended="prog-1") == "prog-2"
    # a concurrent continuation that saw prog-1 end too joins the replacement
    assert store.chain_program("alice", "a1", "prog-3", ended="prog-1") == "prog-2"
    assert store.get("alice", "a1").program_id == "prog-2"


def test_recording_a_chains_program_is_not_a_use():
    store, clock = make(ttl=10.0)
    store.put("alice", "a1", stored(program_id=None))
    clock.now = 9.0
    store.chain_program("alice", "a1", "prog-2")
    clock.now = 10.0
    assert kept(store, "alice", "a1") == []  # last used at 0


@pytest.mark.parametrize("limits, field", [
    (dict(max_per_tenant=0), "responses_per_tenant"),
    (dict(max_bytes=0), "responses_max_bytes"),
    (dict(ttl=0.0), "responses_ttl"),
])
def test_bad_limits_are_refused_naming_the_field(limits, field):
    with pytest.raises(ValueError, match=f"^{field}: must be positive"):
        ResponseLimits(**limits)
