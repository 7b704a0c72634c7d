"""Chain hashes kept across admissions (per call, and in the manager's bounded memo) are
exactly the hashes computed from scratch, and nothing is kept past its bound."""

import random

import chain_hashes
import pytest
from test_kv_host_tier import prefill

import kvcache.manager
from kvcache import KVCacheManager
from kvcache.prefix_hash import BlockHashMemo, hash_block, shared_chain_hashes

BLOCK = 4


def scratch_hashes(tokens: list[int]) -> list[int]:
    return chain_hashes.scratch_hashes(tokens, BLOCK)


@pytest.fixture
def counted(monkeypatch) -> list[tuple[int, ...]]:
    """The token ids of every block the manager hashes with `hash_block`."""
    calls: list[tuple[int, ...]] = []

    def counting_hash(parent, tokens):
        calls.append(tuple(tokens))
        return hash_block(parent, tokens)

    monkeypatch.setattr(kvcache.manager, "hash_block", counting_hash)
    return calls


def test_incremental_hashes_equal_hashes_from_scratch():
    rng = random.Random(0)
    mgr = KVCacheManager(64, BLOCK, enable_prefix_caching=True)
    tokens = [rng.randrange(50_000) for _ in range(6)]
    for turn in range(8):  # an agent program: each call re-sends the growing history
        call_id = f"call{turn}"
        prefill(mgr, call_id, tokens)
        for _ in range(rng.randrange(1, 9)):  # decode, caching each block it fills
            tokens.append(rng.randrange(50_000))
            assert mgr.allocate(call_id, len(tokens))
            mgr.cache_blocks(call_id, tokens, len(tokens))
        assert mgr._calls[call_id].hashes == scratch_hashes(tokens)
        mgr.free(call_id, owner="program")
        tokens += [rng.randrange(50_000) for _ in range(rng.randrange(1, 7))]  # tool output
    mgr.check_integrity()


def test_per_call_hashes_are_dropped_when_the_call_is_freed():
    mgr = KVCacheManager(64, BLOCK, enable_prefix_caching=True)
    for n in range(20):
        prefill(mgr, f"call{n}", list(range(n * 100, n * 100 + 9)))
        mgr.free(f"call{n}")
    assert mgr._calls == {}
    mgr.check_integrity()


def test_memo_is_bounded_by_the_blocks_both_tiers_can_cache():
    mgr = KVCacheManager(8, BLOCK, num_host_blocks=4, enable_prefix_caching=True)
    assert mgr._hash_memo.capacity == 12
    for n in range(50):  # 100 distinct blocks, never hashed again
        prefill(mgr, f"call{n}", list(range(n * 100, n * 100 + 9)))
        mgr.free(f"call{n}")
    assert 0 < len(mgr._hash_memo) <= 12
    mgr.check_integrity()


def test_memo_keeps_recent_entries_and_forgets_old_ones():
    memo = BlockHashMemo(4)  # two generations of 2
    keys = [(None, (n,)) for n in range(4)]
    for n, key in enumerate(keys[:3]):
        memo.put(key, n)  # the third put ages keys 0 and 1
    assert memo.get(keys[0]) == 0  # used while old: copied back to the young generation
    memo.put(keys[3], 3)  # ages keys 2 and 0; key 1, unused since it aged, is dropped
    assert [memo.get(key) for key in keys] == [0, None, 2, 3]
    assert len(memo) <= 4
    with pytest.raises(ValueError, match="capacity"):
        BlockHashMemo(1)


def test_readmitted_call_does_not_rehash_its_old_blocks(counted):
    mgr = KVCacheManager(16, BLOCK, enable_prefix_caching=True)
    tokens = list(range(100, 110))
    prefill(mgr, "a", tokens)
    assert counted == [tuple(tokens[0:4]), tuple(tokens[4:8])]
    mgr.free("a", owner="program", rank=1.0)  # preempted, its KV kept in the prefix cache
    tokens += [7, 8, 9]  # it had generated more before the preemption
    assert mgr.match_prefix("a", tokens) == 8
    assert mgr.allocate("a", len(tokens))
    mgr.cache_blocks("a", tokens, len(tokens))
    assert counted[2:] == [tuple(tokens[8:12])]  # only the block it had not filled before
    assert mgr._calls["a"].hashes == scratch_hashes(tokens)
    mgr.check_integrity()


def test_next_call_of_a_program_hashes_only_its_new_blocks(counted):
    mgr = KVCacheManager(16, BLOCK, enable_prefix_caching=True)
    history = list(range(100, 113))
    prefill(mgr, "first", history)
    mgr.free("first", owner="program")
    hashed = len(counted)
    history += list(range(200, 206))
    assert prefill(mgr, "second", history) == 12
    assert counted[hashed:] == [tuple(history[12:16])]
    mgr.check_integrity()


def test_a_callers_hash_list_is_extended_in_place_and_kept_across_frees(monkeypatch):
    """A waiting call matched, released and matched again with the list its scheduler
    record keeps: the second match hashes nothing, not even through the memo."""
    mgr = KVCacheManager(16, BLOCK, enable_prefix_caching=True)
    tokens = list(range(100, 113))  # 3 full blocks and 1 token
    prefill(mgr, "warm", tokens)
    mgr.free("warm", owner="program")
    kept: list[int] = []
    assert mgr.match_prefix("a", tokens, kept) == 12
    assert kept == scratch_hashes(tokens)
    mgr.free("a", owner="program", rank=1.0)  # it could not start: released
    appended: list[tuple[int, ...]] = []
    monkeypatch.setattr(mgr, "_append_hash", lambda hashes, block: appended.append(block))
    assert mgr.match_prefix("a", tokens, kept) == 12
    assert appended == [] and mgr._calls["a"].hashes is kept
    mgr.free("a")
    mgr.check_integrity()


def test_a_run_lookup_stops_at_the_first_block_whose_tokens_differ():
    """Hashes narrow the search; token ids decide: equal hashes over other tokens miss."""
    mgr = KVCacheManager(16, BLOCK, enable_prefix_caching=True)
    tokens = list(range(100, 113))
    prefill(mgr, "a", tokens)
    hashes, table = scratch_hashes(tokens), mgr.block_table("a")
    assert mgr.pool.lookup_run(hashes, tokens, 0, 3, BLOCK) == table[:3]
    assert mgr.pool.lookup_run(hashes, tokens, 1, 3, BLOCK) == table[1:3]
    forged = tokens[:5] + [0] + tokens[6:]  # block 1's tokens differ, its hash does not
    assert mgr.pool.lookup_run(hashes, forged, 0, 3, BLOCK) == table[:1]
    assert mgr.pool.lookup_run(hashes[:1] + [7, 8], tokens, 0, 3, BLOCK) == table[:1]
    mgr.free("a")
    mgr.check_integrity()


@pytest.mark.parametrize("new_tokens, blocks", [
    (list(range(100, 113)) + [1, 2, 3, 4], 3),  # extends the history: every hash it has
    (list(range(100, 108)) + [0] + list(range(109, 113)), 2),  # differs in block 2
    ([0] + list(range(101, 113)), 0),  # differs in its first token
    (list(range(100, 106)), 1),  # shorter: its one full block
    (list(range(100, 113)), 3),  # the same 13 tokens
])
def test_shared_chain_hashes_are_the_earlier_calls_up_to_the_first_block_that_differs(
        new_tokens, blocks):
    earlier = list(range(100, 113)) + [5, 6, 7]  # 4 full blocks, hashes for 3 of them
    earlier_hashes = scratch_hashes(earlier)[:3]
    shared = shared_chain_hashes(earlier, earlier_hashes, new_tokens, BLOCK)
    assert shared == earlier_hashes[:blocks] == scratch_hashes(new_tokens)[:blocks]
    shared.append(0)  # a new list: the earlier call's stays as it was
    assert len(earlier_hashes) == 3


def test_every_split_point_is_found():
    """The search for the first differing block agrees with a block-by-block walk."""
    rng = random.Random(1)
    earlier = [rng.randrange(9) for _ in range(40)]
    hashes = scratch_hashes(earlier)
    for at in range(len(earlier)):
        new = earlier[:at] + [99] + earlier[at + 1:]
        assert shared_chain_hashes(earlier, hashes, new, BLOCK) == hashes[:at // BLOCK]
