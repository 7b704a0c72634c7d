"""`KVCacheManager.prefetch`: host-cached blocks of an idle owner come back onto free device
blocks as its cached blocks (findable at once, at its rank), as many as free blocks allow,
never evicting KV ranked above `max_rank`, and a failed step leaves none of them findable.
Exact (host, device) pairs; both tiers checked at every point."""

from test_kv_host_tier import BLOCK, PROMPT, cached_then_evicted, chain, make_manager


def on_host_after_b(mgr, b_rank: float | None = None) -> None:
    """A's two blocks of PROMPT go to host blocks (tail first: block 1 on host 0, block 0 on
    host 1); then b is freed, at `b_rank` as program B's cached KV (None: plain free)."""
    assert cached_then_evicted(mgr, rank=5.0) == [(2, 0), (1, 1)]
    mgr.end_step()
    if b_rank is None:
        mgr.free("b")
    else:
        mgr.cache_blocks("b", list(range(500, 528)), 28)
        mgr.free("b", owner="B", rank=b_rank)
    mgr.check_integrity()


def device_block_of(mgr, i: int) -> int | None:
    return mgr.pool.lookup(chain(PROMPT)[i], PROMPT[i * BLOCK:(i + 1) * BLOCK])


def test_prefetched_blocks_are_the_owners_cached_blocks_at_its_rank():
    mgr = make_manager()
    on_host_after_b(mgr)
    pairs = mgr.prefetch("A", PROMPT, rank=5.0)
    assert pairs == [(1, 1), (0, 2)]  # block 0 of the prefix first, onto b's freed blocks
    assert [device_block_of(mgr, i) for i in (0, 1)] == [1, 2]
    assert [mgr.pool.free_rank(b) for b in (1, 2)] == [5.0, 5.0]
    assert mgr.num_kept_blocks_of("A") == 2 and mgr.num_prefetched_blocks == 2
    mgr.check_integrity()
    mgr.end_step()  # the copies ran: the host blocks are free again, cached on one tier
    assert mgr.host_pool.num_cached == 0 and mgr.num_free_host_blocks == 4
    assert mgr.match_prefix("a2", PROMPT + [1, 2, 3]) == 8
    mgr.check_integrity()


def test_prefetch_never_evicts_live_kv_and_takes_only_what_is_free():
    mgr = make_manager()
    on_host_after_b(mgr, b_rank=3.0)  # every device block is B's KV now
    assert mgr.prefetch("A", PROMPT, rank=5.0) == []  # even though A ranks above B
    assert mgr.host_pool.num_cached == 2 and mgr.pool.num_cached_free_of("B") == 7
    mgr.set_rank("B", 0.0)  # B ended: its KV may go, oldest first
    mgr.pool.incref([1, 2, 3, 4, 5, 6])  # but six of its blocks are in use again
    pairs = mgr.prefetch("A", PROMPT, rank=5.0)
    assert pairs == [(1, 7)]  # one block was evictable: the prefix's first comes back
    assert mgr.host_pool.num_cached == 1
    mgr.end_step()
    assert mgr.prefetch("A", PROMPT, rank=5.0) == []  # nothing free: block 1 stays on host


def test_a_failed_step_leaves_no_prefetched_block_findable():
    mgr = make_manager()
    on_host_after_b(mgr)
    assert mgr.prefetch("A", PROMPT, rank=5.0) == [(1, 1), (0, 2)]
    mgr.abort_step()  # the copies may not have run
    assert [device_block_of(mgr, i) for i in (0, 1)] == [None, None]
    assert mgr.host_pool.num_cached == 0 and mgr.num_free_host_blocks == 4
    assert mgr.num_free_blocks == mgr.pool.num_usable
    mgr.check_integrity()


def test_nothing_to_prefetch_without_host_copies_or_past_the_full_blocks():
    mgr = make_manager()
    assert mgr.prefetch("A", PROMPT, rank=5.0) == []
    on_host_after_b(mgr)
    assert mgr.prefetch("A", PROMPT[:7], rank=5.0) == [(1, 1)]  # one full block only
