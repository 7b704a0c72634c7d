"""BlockPool: exact ids, LRU free-list order, ref counts, prefix index, integrity."""

import pytest

from kvcache import BlockPool, KVCacheIntegrityError


def drain(pool: BlockPool) -> list[int]:
    """Allocate every free block: the free list in order (head first)."""
    return pool.allocate(pool.num_free)


def test_allocate_hands_out_increasing_ids_and_skips_the_null_block():
    pool = BlockPool(5)
    assert (pool.num_usable, pool.num_free) == (4, 4)
    assert pool.allocate(2) == [1, 2]
    assert (pool.num_free, pool.ref_count(1), pool.ref_count(2), pool.ref_count(0)) == (2, 1, 1, 0)
    pool.check_integrity({1: 1, 2: 1})
    pool.free([1, 2])
    assert pool.num_free == 4
    pool.check_integrity({})
    assert drain(pool) == [3, 4, 2, 1]
    pool.check_integrity({1: 1, 2: 1, 3: 1, 4: 1})


def test_without_null_block_every_id_is_usable():
    pool = BlockPool(3, reserve_null_block=False)
    assert pool.allocate(3) == [0, 1, 2]
    pool.check_integrity({0: 1, 1: 1, 2: 1})


def test_free_goes_in_reverse_so_the_tail_is_reused_first():
    pool = BlockPool(4)
    assert pool.allocate(3) == [1, 2, 3]
    pool.free([1, 2, 3])
    assert [pool.allocate(1), pool.allocate(1), pool.allocate(1)] == [[3], [2], [1]]
    assert pool.allocate(1) is None
    pool.check_integrity({1: 1, 2: 1, 3: 1})


def test_failed_allocation_changes_nothing():
    pool = BlockPool(6)
    pool.allocate(5)
    pool.register(2, 22, [7, 7])
    pool.free([1, 2, 3])  # plain: 3, 1; cached: 2
    assert pool.allocate(4) is None
    assert pool.num_free == 3 and pool.is_cached(2)
    pool.check_integrity({4: 1, 5: 1})
    assert pool.lookup(22, [7, 7]) == 2
    assert drain(pool) == [3, 1, 2]  # uncached blocks go before cached ones
    assert not pool.is_cached(2)


def test_double_free_raises_and_changes_nothing():
    pool = BlockPool(4)
    pool.allocate(2)
    with pytest.raises(KVCacheIntegrityError, match="block 2"):
        pool.free([1, 2, 2])
    pool.check_integrity({1: 1, 2: 1})
    pool.free([2])
    with pytest.raises(KVCacheIntegrityError, match="block 2"):
        pool.free([2])


def test_shared_block_is_freed_only_by_its_last_owner():
    pool = BlockPool(4)
    pool.allocate(2)
    pool.incref([1])
    pool.free([1, 2])
    assert (pool.ref_count(1), pool.num_free) == (1, 2)
    pool.check_integrity({1: 1})
    pool.free([1])
    assert drain(pool) == [3, 2, 1]


def test_incref_revives_a_cached_free_block_with_its_content():
    pool = BlockPool(5)
    pool.allocate(2)
    pool.register(1, 11, [1, 2])
    pool.free([1, 2])  # free list: 3, 4, 2, 1
    assert (pool.num_cached_free, pool.lookup(11, [1, 2])) == (1, 1)
    pool.incref([1])
    assert (pool.ref_count(1), pool.num_free, pool.num_cached_free) == (1, 3, 0)
    assert pool.lookup(11, [1, 2]) == 1
    pool.check_integrity({1: 1})
    assert drain(pool) == [3, 4, 2]


def test_lookup_verifies_token_ids():
    pool = BlockPool(4)
    pool.allocate(2)
    pool.register(1, 5, [1, 2])
    assert pool.lookup(5, [1, 2]) == 1
    assert pool.lookup(5, [1, 3]) is None
    assert pool.lookup(6, [1, 2]) is None


def test_register_keeps_the_first_block_for_a_hash():
    pool = BlockPool(4)
    pool.allocate(2)
    pool.register(1, 5, [1, 2])
    pool.register(2, 5, [1, 2])
    pool.register(1, 5, [1, 2])
    assert (pool.lookup(5, [1, 2]), pool.is_cached(2)) == (1, False)
    pool.check_integrity({1: 1, 2: 1})


def test_register_rejects_free_or_recached_blocks():
    pool = BlockPool(4)
    pool.allocate(1)
    pool.register(1, 5, [1])
    with pytest.raises(KVCacheIntegrityError, match="block 1"):
        pool.register(1, 6, [2])
    with pytest.raises(KVCacheIntegrityError, match="block 2"):
        pool.register(2, 7, [1])


def test_allocation_evicts_a_cached_block_from_the_index():
    pool = BlockPool(3)
    pool.allocate(2)
    pool.register(1, 11, [1])
    pool.register(2, 12, [2])
    pool.free([1, 2])  # free list: 2, 1
    assert pool.num_cached_free == 2
    assert pool.allocate(1) == [2]
    assert (pool.lookup(12, [2]), pool.lookup(11, [1])) == (None, 1)
    assert (pool.is_cached(2), pool.num_cached_free) == (False, 1)
    pool.check_integrity({2: 1})


def test_check_integrity_names_the_block_whose_ref_count_disagrees():
    pool = BlockPool(4)
    pool.allocate(2)
    with pytest.raises(KVCacheIntegrityError, match="block 2: ref count 1, expected 0"):
        pool.check_integrity({1: 1})
    with pytest.raises(KVCacheIntegrityError, match="block 1: ref count 1, expected 2"):
        pool.check_integrity({1: 2, 2: 1})
    with pytest.raises(KVCacheIntegrityError, match="block 0"):
        pool.check_integrity({0: 1, 1: 1, 2: 1})


@pytest.mark.parametrize(
    "call, field",
    [
        (lambda: BlockPool(1), "num_blocks"),
        (lambda: BlockPool(0, reserve_null_block=False), "num_blocks"),
        (lambda: BlockPool(4).allocate(-1), "n"),
        (lambda: BlockPool(4).incref([0]), "block_id"),
        (lambda: BlockPool(4).free([4]), "block_id"),
        (lambda: BlockPool(4).free([0]), "block_id"),
        (lambda: BlockPool(4).ref_count(4), "block_id"),
    ],
)
def test_bad_arguments_raise_value_error_naming_the_field(call, field):
    with pytest.raises(ValueError, match=field):
        call()
