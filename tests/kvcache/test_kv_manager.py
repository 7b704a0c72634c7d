"""KVCacheManager: per-call tables, prefix caching, swap bookkeeping, all with exact ids."""

import subprocess
import sys

import pytest

import kvcache.manager
from kvcache import KVCacheIntegrityError, KVCacheManager

BLOCK = 4


def make_manager(num_blocks=16, num_host_blocks=0, prefix=False) -> KVCacheManager:
    return KVCacheManager(num_blocks, BLOCK, num_host_blocks, enable_prefix_caching=prefix)


def prompt(n: int, start: int = 100) -> list[int]:
    return list(range(start, start + n))


def run_prefill(mgr: KVCacheManager, call_id: str, tokens: list[int]) -> int:
    """What the engine does for a new call: match, allocate the rest, compute, cache."""
    hit = mgr.match_prefix(call_id, tokens)
    assert mgr.allocate(call_id, len(tokens))
    mgr.cache_blocks(call_id, tokens, len(tokens))
    return hit


def test_bookkeeping_modules_do_not_import_torch():
    code = "import sys, kvcache, kvcache.manager; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_allocate_and_free():
    mgr = make_manager(num_blocks=8)
    assert mgr.allocate("a", 10)
    assert (mgr.block_table("a"), mgr.num_free_blocks) == ([1, 2, 3], 4)
    assert mgr.allocate("b", 4)
    assert mgr.block_table("b") == [4]
    assert not mgr.allocate("c", 13)
    assert (mgr.block_table("c"), mgr.num_free_blocks) == ([], 3)
    mgr.check_integrity()
    mgr.free("a")
    mgr.free("a")
    mgr.free("never-seen")
    assert (mgr.block_table("a"), mgr.num_free_blocks) == ([], 6)
    assert mgr.allocate("c", 24)
    assert mgr.block_table("c") == [5, 6, 7, 3, 2, 1]
    mgr.check_integrity()


def test_failed_growth_keeps_the_table():
    mgr = make_manager(num_blocks=4)
    assert mgr.allocate("a", 4)
    assert not mgr.allocate("a", 16)
    assert (mgr.block_table("a"), mgr.num_free_blocks) == ([1], 2)
    mgr.check_integrity()


def test_decode_fills_the_last_block_before_taking_another():
    mgr = make_manager()
    assert mgr.allocate("a", 5)
    assert mgr.block_table("a") == [1, 2]
    for num_tokens in (6, 7, 8):
        assert mgr.blocks_needed("a", num_tokens) == 0
        assert mgr.allocate("a", num_tokens)
        assert mgr.block_table("a") == [1, 2]
    assert mgr.blocks_needed("a", 9) == 1
    assert mgr.allocate("a", 9)
    assert mgr.block_table("a") == [1, 2, 3]
    assert mgr.blocks_needed("b", 9) == 3
    mgr.check_integrity()


def test_prefix_hit_shares_blocks_and_raises_ref_counts():
    mgr = make_manager(prefix=True)
    tokens = prompt(10)
    assert run_prefill(mgr, "a", tokens) == 0
    assert mgr.block_table("a") == [1, 2, 3]
    assert run_prefill(mgr, "b", tokens) == 8
    assert mgr.block_table("b") == [1, 2, 4]
    assert [mgr.pool.ref_count(b) for b in (1, 2, 3, 4)] == [2, 2, 1, 1]
    mgr.check_integrity()
    mgr.free("a")
    assert [mgr.pool.ref_count(b) for b in (1, 2, 3, 4)] == [1, 1, 0, 1]
    mgr.check_integrity()


def test_hit_leaves_the_last_token_to_compute():
    mgr = make_manager(prefix=True)
    tokens = prompt(8)
    run_prefill(mgr, "a", tokens)
    assert mgr.match_prefix("b", tokens) == 4
    assert mgr.block_table("b") == [1]
    assert (mgr.pool.ref_count(1), mgr.pool.ref_count(2)) == (2, 1)
    assert mgr.match_prefix("c", tokens[:4]) == 0
    assert mgr.match_prefix("d", tokens[:5]) == 4
    mgr.check_integrity()


def test_hit_stops_at_the_first_differing_block():
    mgr = make_manager(prefix=True)
    run_prefill(mgr, "a", prompt(13))
    other = prompt(13)
    other[5] = 0
    assert mgr.match_prefix("b", other) == 4
    assert mgr.block_table("b") == [1]
    mgr.check_integrity()


def test_freed_cached_blocks_are_revived_with_the_same_ids():
    mgr = make_manager(num_blocks=8, prefix=True)
    tokens = prompt(10)
    run_prefill(mgr, "a", tokens)
    mgr.free("a")  # free list: 4, 5, 6, 7, 3, 2, 1
    assert (mgr.num_free_blocks, mgr.pool.num_cached_free) == (7, 2)
    assert mgr.match_prefix("b", tokens) == 8
    assert mgr.block_table("b") == [1, 2]
    assert (mgr.pool.ref_count(1), mgr.pool.ref_count(2), mgr.num_free_blocks) == (1, 1, 5)
    assert mgr.pool.num_cached_free == 0
    assert mgr.allocate("c", 20)
    assert mgr.block_table("c") == [4, 5, 6, 7, 3]
    mgr.check_integrity()


def test_a_cached_block_taken_by_allocation_is_no_longer_found():
    mgr = make_manager(num_blocks=4, prefix=True)
    tokens = prompt(9)
    run_prefill(mgr, "a", tokens)
    assert mgr.block_table("a") == [1, 2, 3]
    mgr.free("a")  # free list: 3, 2, 1
    assert mgr.allocate("c", 8)
    assert mgr.block_table("c") == [3, 2]
    assert (mgr.pool.is_cached(2), mgr.pool.is_cached(1)) == (False, True)
    assert mgr.match_prefix("b", tokens) == 4
    assert mgr.block_table("b") == [1]
    mgr.check_integrity()


def test_equal_hashes_with_different_tokens_are_not_hits(monkeypatch):
    monkeypatch.setattr(kvcache.manager, "hash_block", lambda parent, tokens: 7)
    mgr = make_manager(prefix=True)
    run_prefill(mgr, "a", prompt(9, start=1))
    assert mgr.match_prefix("b", prompt(9, start=11)) == 0
    assert mgr.block_table("b") == []
    assert mgr.match_prefix("c", prompt(9, start=1)) == 4
    assert mgr.block_table("c") == [1]
    mgr.check_integrity()


def test_chain_hashes_are_computed_once_per_block(monkeypatch):
    calls = []

    def counting_hash(parent, tokens):
        calls.append(tuple(tokens))
        return kvcache.prefix_hash.hash_block(parent, tokens)

    monkeypatch.setattr(kvcache.manager, "hash_block", counting_hash)
    mgr = make_manager(prefix=True)
    tokens = prompt(10)
    run_prefill(mgr, "a", tokens)
    tokens += [1, 2]
    assert mgr.allocate("a", 12)
    mgr.cache_blocks("a", tokens, 12)
    mgr.cache_blocks("a", tokens, 12)
    assert calls == [tuple(tokens[0:4]), tuple(tokens[4:8]), tuple(tokens[8:12])]
    assert [mgr.pool.is_cached(b) for b in (1, 2, 3)] == [True, True, True]
    mgr.check_integrity()


def test_cache_blocks_registers_only_full_computed_blocks():
    mgr = make_manager(prefix=True)
    tokens = prompt(10)
    assert mgr.allocate("a", 10)
    mgr.cache_blocks("a", tokens, 3)
    assert mgr.pool.num_cached_free == 0 and not mgr.pool.is_cached(1)
    mgr.cache_blocks("a", tokens, 9)
    assert [mgr.pool.is_cached(b) for b in (1, 2, 3)] == [True, True, False]
    with pytest.raises(KVCacheIntegrityError, match="4 computed blocks but 3 allocated"):
        mgr.cache_blocks("a", tokens + [0] * 6, 16)
    with pytest.raises(ValueError, match="num_computed_tokens"):
        mgr.cache_blocks("a", tokens, 11)
    mgr.check_integrity()


def test_prefix_caching_off_never_hits_nor_caches():
    mgr = make_manager()
    tokens = prompt(10)
    assert run_prefill(mgr, "a", tokens) == 0
    assert not any(mgr.pool.is_cached(b) for b in (1, 2, 3))
    assert mgr.match_prefix("b", tokens) == 0
    assert mgr.block_table("b") == []
    mgr.check_integrity()


def test_match_prefix_needs_a_call_without_blocks():
    mgr = make_manager(prefix=True)
    mgr.allocate("a", 4)
    with pytest.raises(ValueError, match="call_id"):
        mgr.match_prefix("a", prompt(9))


def swap_setup() -> KVCacheManager:
    mgr = make_manager(num_blocks=10, num_host_blocks=5)
    for call_id, num_tokens in (("a", 8), ("b", 12), ("c", 4)):
        assert mgr.allocate(call_id, num_tokens)
    assert [mgr.block_table(c) for c in "abc"] == [[1, 2], [3, 4, 5], [6]]
    return mgr


def test_swap_out_and_in_move_tables_between_pools():
    mgr = swap_setup()
    assert mgr.swap_out(["a", "c"]) == [(1, 0), (2, 1), (6, 2)]
    assert (mgr.is_swapped("a"), mgr.is_swapped("b"), mgr.is_swapped("c")) == (True, False, True)
    assert (mgr.block_table("a"), mgr.num_host_blocks_of("a"), mgr.num_host_blocks_of("c")) == (
        [], 2, 1
    )
    assert (mgr.num_free_blocks, mgr.num_free_host_blocks) == (6, 2)
    mgr.check_integrity()
    assert mgr.swap_in(["c", "a"]) == [(2, 7), (0, 8), (1, 9)]
    assert (mgr.block_table("a"), mgr.block_table("c")) == ([8, 9], [7])
    assert (mgr.num_free_blocks, mgr.num_free_host_blocks) == (3, 2)  # read by this step
    mgr.check_integrity()
    mgr.end_step()
    assert (mgr.num_free_blocks, mgr.num_free_host_blocks) == (3, 5)
    assert not mgr.is_swapped("a") and mgr.num_host_blocks_of("a") == 0
    mgr.check_integrity()


def test_swap_out_with_a_short_host_pool_changes_nothing():
    mgr = swap_setup()
    assert mgr.swap_out(["a"]) == [(1, 0), (2, 1)]
    assert mgr.swap_out(["b", "c"]) is None
    assert (mgr.block_table("b"), mgr.block_table("c")) == ([3, 4, 5], [6])
    assert (mgr.num_free_blocks, mgr.num_free_host_blocks) == (5, 3)
    assert not mgr.is_swapped("b")
    mgr.check_integrity()
    assert make_manager(num_blocks=4).swap_out([]) == []


def test_swap_in_with_a_short_device_pool_changes_nothing():
    mgr = swap_setup()
    assert mgr.swap_out(["b"]) == [(3, 0), (4, 1), (5, 2)]
    assert mgr.allocate("d", 16)
    assert mgr.num_free_blocks == 2
    assert mgr.swap_in(["b"]) is None
    assert (mgr.is_swapped("b"), mgr.num_host_blocks_of("b"), mgr.num_free_host_blocks) == (
        True, 3, 2
    )
    mgr.check_integrity()
    mgr.free("b")
    assert (mgr.num_free_host_blocks, mgr.is_swapped("b")) == (5, False)
    mgr.check_integrity()


def test_swapping_out_a_sharer_only_drops_its_refs():
    mgr = make_manager(num_blocks=8, num_host_blocks=4, prefix=True)
    tokens = prompt(10)
    run_prefill(mgr, "a", tokens)
    run_prefill(mgr, "b", tokens)
    assert mgr.block_table("b") == [1, 2, 4]
    assert mgr.swap_out(["b"]) == [(1, 0), (2, 1), (4, 2)]
    assert [mgr.pool.ref_count(b) for b in (1, 2, 3, 4)] == [1, 1, 1, 0]
    mgr.check_integrity()
    assert mgr.swap_in(["b"]) == [(0, 5), (1, 6), (2, 7)]
    mgr.cache_blocks("b", tokens, 10)
    assert not any(mgr.pool.is_cached(b) for b in (5, 6, 7))
    mgr.check_integrity()


def test_swapped_in_blocks_are_recached_once_the_originals_are_gone():
    mgr = make_manager(num_blocks=4, num_host_blocks=4, prefix=True)
    tokens = prompt(8)
    run_prefill(mgr, "a", tokens)
    assert mgr.swap_out(["a"]) == [(1, 0), (2, 1)]
    assert mgr.allocate("x", 12)  # takes 3, 2, 1: evicts a's cached blocks
    mgr.free("x")  # free list: 1, 2, 3
    assert mgr.allocate("y", 4)
    assert mgr.swap_in(["a"]) == [(0, 2), (1, 3)]
    mgr.cache_blocks("a", tokens, 8)
    assert mgr.match_prefix("b", tokens + [0]) == 8
    assert mgr.block_table("b") == [2, 3]
    mgr.check_integrity()


def test_no_host_pool_means_swap_out_fails():
    mgr = make_manager()
    mgr.allocate("a", 4)
    assert mgr.swap_out(["a"]) is None
    assert mgr.block_table("a") == [1]
    mgr.check_integrity()


def test_swap_misuse_raises_value_error():
    mgr = swap_setup()
    with pytest.raises(ValueError, match="call_ids"):
        mgr.swap_out(["nope"])
    with pytest.raises(ValueError, match="call_ids"):
        mgr.swap_out(["a", "a"])
    with pytest.raises(ValueError, match="call_ids"):
        mgr.swap_in(["a"])
    mgr.swap_out(["a"])
    with pytest.raises(ValueError, match="call_id"):
        mgr.allocate("a", 12)
    with pytest.raises(ValueError, match="call_ids"):
        mgr.swap_out(["a"])
    mgr.check_integrity()


def test_check_integrity_catches_refs_taken_behind_its_back():
    mgr = swap_setup()
    mgr.pool.incref([2])
    with pytest.raises(KVCacheIntegrityError, match="block 2: ref count 2, expected 1"):
        mgr.check_integrity()


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(num_blocks=1, block_size=4), "num_blocks"),
        (dict(num_blocks=8, block_size=0), "block_size"),
        (dict(num_blocks=8, block_size=4, num_host_blocks=-1), "num_host_blocks"),
    ],
)
def test_bad_sizes_raise_value_error_naming_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        KVCacheManager(**kwargs)
