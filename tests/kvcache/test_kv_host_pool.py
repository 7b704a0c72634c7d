"""HostBlockPool: exact ids, all-or-nothing allocation, integrity."""

import pytest

from kvcache import HostBlockPool, KVCacheIntegrityError


def test_allocate_free_and_counts():
    pool = HostBlockPool(4)
    assert pool.allocate(3) == [0, 1, 2]
    assert (pool.num_free, pool.num_blocks) == (1, 4)
    assert pool.allocate(2) is None
    assert pool.num_free == 1
    pool.check_integrity([0, 1, 2])
    pool.free([2, 0])
    pool.check_integrity([1])
    assert pool.allocate(3) == [3, 2, 0]
    pool.check_integrity([0, 1, 2, 3])


def test_empty_pool_only_satisfies_empty_requests():
    pool = HostBlockPool(0)
    assert pool.allocate(0) == []
    assert pool.allocate(1) is None
    pool.check_integrity([])


def test_freeing_an_unheld_block_raises_and_changes_nothing():
    pool = HostBlockPool(3)
    pool.allocate(2)
    with pytest.raises(KVCacheIntegrityError, match="host block 1"):
        pool.free([0, 1, 1])
    with pytest.raises(KVCacheIntegrityError, match="host block 2"):
        pool.free([2])
    pool.check_integrity([0, 1])


def test_check_integrity_names_the_disagreeing_block():
    pool = HostBlockPool(3)
    pool.allocate(2)
    with pytest.raises(KVCacheIntegrityError, match="host block 1"):
        pool.check_integrity([0])
    with pytest.raises(KVCacheIntegrityError, match="host block 0: held by more than one"):
        pool.check_integrity([0, 0, 1])


def test_bad_arguments_raise_value_error_naming_the_field():
    with pytest.raises(ValueError, match="num_blocks"):
        HostBlockPool(-1)
    with pytest.raises(ValueError, match="n must"):
        HostBlockPool(2).allocate(-1)
