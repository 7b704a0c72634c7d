"""KVCacheManager with a sliding attention window: a call's blocks wholly before the window of
its next token are released, the null block stands in for them, and free, swap and the prefix
cache account for exactly the blocks still held. Exact block ids throughout."""

import pytest

from kvcache import KVCacheIntegrityError, KVCacheManager

BLOCK = 4


def windowed(window=6, num_blocks=12, num_host_blocks=0, prefix=False) -> KVCacheManager:
    return KVCacheManager(num_blocks, BLOCK, num_host_blocks, enable_prefix_caching=prefix,
                          attention_window=window)


def test_blocks_wholly_before_the_window_are_released_for_the_null_block():
    mgr = windowed(window=6)
    assert mgr.allocate("a", 16)
    assert mgr.block_table("a") == [1, 2, 3, 4]
    # The token at position 8 sees keys 3..8: block 0 (keys 0-3) still holds key 3.
    assert mgr.drop_outside_window("a", 8) == 0
    # Position 9 sees 4..9: block 0 is out; position 14 sees 9..14: blocks 0 and 1 are out.
    assert mgr.drop_outside_window("a", 9) == 1
    assert mgr.block_table("a") == [0, 2, 3, 4]
    assert mgr.drop_outside_window("a", 14) == 1
    assert mgr.block_table("a") == [0, 0, 3, 4]
    assert mgr.drop_outside_window("a", 14) == 0  # nothing newly out
    assert mgr.num_free_blocks == 11 - 2
    mgr.check_integrity()
    mgr.free("a")
    assert mgr.num_free_blocks == 11
    mgr.check_integrity()


def test_a_released_block_serves_another_call_while_the_table_grows():
    mgr = windowed(window=4, num_blocks=4)  # 3 usable blocks
    assert mgr.allocate("a", 12)
    assert not mgr.allocate("a", 13)  # the pool is full
    assert mgr.drop_outside_window("a", 12) == 2  # sees 9..12: blocks 0 and 1 are out
    assert mgr.allocate("a", 13)
    assert mgr.block_table("a") == [0, 0, 3, 2]  # block 2 came back as the table's 4th
    mgr.check_integrity()


def test_no_window_unknown_or_swapped_calls_release_nothing():
    plain = KVCacheManager(12, BLOCK)
    assert plain.allocate("a", 16) and plain.drop_outside_window("a", 15) == 0
    mgr = windowed(num_host_blocks=8)
    assert mgr.drop_outside_window("nobody", 30) == 0
    assert mgr.allocate("a", 16)
    assert mgr.swap_out(["a"]) == [(1, 0), (2, 1), (3, 2), (4, 3)]
    assert mgr.drop_outside_window("a", 15) == 0
    with pytest.raises(ValueError, match="attention_window must be >= 0"):
        KVCacheManager(12, BLOCK, attention_window=-1)


def test_swap_moves_only_held_blocks_and_restores_the_nulls():
    mgr = windowed(window=6, num_host_blocks=8)
    assert mgr.allocate("a", 16)
    assert mgr.drop_outside_window("a", 14) == 2
    assert mgr.swap_out(["a"]) == [(3, 0), (4, 1)]
    assert mgr.num_host_blocks_of("a") == 2
    mgr.check_integrity()
    assert mgr.swap_in(["a"]) == [(0, 5), (1, 6)]
    assert mgr.block_table("a") == [0, 0, 5, 6]
    mgr.check_integrity()
    mgr.end_step()
    mgr.free("a")
    assert (mgr.num_free_blocks, mgr.num_free_host_blocks) == (11, 8)
    mgr.check_integrity()


def test_dropped_blocks_stay_cached_until_evicted_and_a_hit_needs_the_first():
    mgr = windowed(window=6, num_blocks=8, prefix=True)
    tokens = list(range(100, 116))
    assert mgr.match_prefix("a", tokens) == 0
    assert mgr.allocate("a", 16)
    mgr.cache_blocks("a", tokens, 16)
    assert mgr.num_cached_blocks_of("a") == 4
    assert mgr.drop_outside_window("a", 15) == 2
    assert mgr.num_cached_blocks_of("a") == 2  # what a free of "a" leaves findable
    # The dropped blocks are findable: a call with the same history hits them (and a's).
    assert mgr.match_prefix("b", tokens + [7]) == 16
    assert mgr.block_table("b") == [1, 2, 3, 4]
    mgr.free("b")
    mgr.check_integrity()
    # Filling the pool takes the plain free blocks, then evicts the least recent cached one:
    # block 2 (b's free released its table last block first). A hit now ends before it.
    assert mgr.allocate("c", 4 * BLOCK)
    assert mgr.block_table("c") == [5, 6, 7, 2]
    assert mgr.match_prefix("d", tokens + [7]) == BLOCK
    assert mgr.block_table("d") == [1]
    mgr.check_integrity()


def test_integrity_catches_a_null_block_among_held_ones():
    mgr = windowed()
    assert mgr.allocate("a", 16)
    mgr.drop_outside_window("a", 9)
    mgr.block_table("a").append(0)  # a corrupted table (block_table's contract forbids it)
    with pytest.raises(KVCacheIntegrityError, match="null block must stand for exactly"):
        mgr.check_integrity()
