"""The host tier of the prefix cache, at the manager: evicted cached blocks of live ranks are
offloaded to host blocks, stay findable there after `end_step`, and come back by
`fetch_prefix`; exact (device, host) pairs, both tiers checked at every point, and the bytes
moved through a BulkSwapper bit-exact."""

import pytest
import torch

from kvcache import KVCacheIntegrityError, KVCacheManager, hash_block
from kvcache.kv_tensor import KVCacheSpec, allocate_kv_cache
from kvcache.swap import BulkSwapper

BLOCK = 4
PROMPT = list(range(100, 109))  # 9 tokens: two full blocks and one token


def make_manager(num_blocks: int = 8, num_host_blocks: int = 4,
                 min_rank: float = 1.0) -> KVCacheManager:
    """Prefix caching on, offload of evicted ranks >= `min_rank` on."""
    mgr = KVCacheManager(num_blocks, BLOCK, num_host_blocks, enable_prefix_caching=True)
    mgr.enable_offload(min_rank)
    return mgr


def prefill(mgr: KVCacheManager, call_id: str, tokens: list[int]) -> int:
    """What the engine does for a new call: match, allocate the rest, compute, cache."""
    hit = mgr.match_prefix(call_id, tokens)
    assert mgr.allocate(call_id, len(tokens))
    mgr.cache_blocks(call_id, tokens, len(tokens))
    return hit


def chain(tokens: list[int]) -> list[int]:
    """Chain hashes of the full blocks of `tokens`."""
    hashes: list[int] = []
    for i in range(len(tokens) // BLOCK):
        hashes.append(hash_block(hashes[-1] if hashes else None, tokens[i * BLOCK:(i + 1) * BLOCK]))
    return hashes


def host_block_of(mgr: KVCacheManager, tokens: list[int], i: int) -> int | None:
    """The host block caching full block `i` of `tokens`, if any."""
    return mgr.host_pool.lookup(chain(tokens)[i], tokens[i * BLOCK:(i + 1) * BLOCK])


def cached_then_evicted(mgr: KVCacheManager, rank: float) -> list[tuple[int, int]]:
    """Call "a" computes PROMPT on blocks [1, 2, 3] and is freed at `rank` by program "A";
    call "b" then takes all 7 device blocks, evicting a's two cached blocks (tail first).
    Returns the offload pairs the eviction owes this step."""
    assert prefill(mgr, "a", PROMPT) == 0
    assert mgr.block_table("a") == [1, 2, 3]
    mgr.free("a", owner="A", rank=rank)  # plain: 4 5 6 7 3; cached: 2, 1
    mgr.check_integrity()
    assert mgr.allocate("b", 7 * BLOCK)
    assert mgr.block_table("b") == [4, 5, 6, 7, 3, 2, 1]
    mgr.check_integrity()
    return mgr.take_offloads()


def test_evicted_blocks_are_offloaded_then_host_cached_then_fetched_back():
    mgr = make_manager()
    assert cached_then_evicted(mgr, rank=2.0) == [(2, 0), (1, 1)]
    assert mgr.take_offloads() == []  # handed over once
    assert (mgr.num_offloaded_blocks, mgr.host_pool.num_cached, mgr.num_free_host_blocks) == \
        (2, 0, 2)  # host blocks 0 and 1 are being written this step
    assert not mgr.pool.is_cached(1) and not mgr.pool.is_cached(2)

    mgr.end_step()
    mgr.check_integrity()
    assert (mgr.host_pool.num_cached, mgr.num_free_host_blocks) == (2, 4)
    assert [host_block_of(mgr, PROMPT, i) for i in (0, 1)] == [1, 0]
    mgr.free("b")  # plain: 1 2 3 7 6 5 4
    mgr.check_integrity()

    assert mgr.match_prefix("c", PROMPT) == 0
    assert mgr.host_prefix_blocks("c", PROMPT) == 2
    assert mgr.fetch_prefix("c", PROMPT, 2) == [(1, 1), (0, 2)]
    assert mgr.block_table("c") == [1, 2]
    h0, h1 = chain(PROMPT)
    assert (mgr.pool.lookup(h0, PROMPT[:4]), mgr.pool.lookup(h1, PROMPT[4:8])) == (1, 2)
    assert [host_block_of(mgr, PROMPT, i) for i in (0, 1)] == [None, None]
    assert (mgr.num_fetched_blocks, mgr.host_pool.num_cached, mgr.num_free_host_blocks) == \
        (2, 0, 2)  # host blocks 0 and 1 are read this step
    mgr.check_integrity()
    mgr.end_step()
    assert mgr.num_free_host_blocks == 4
    mgr.check_integrity()

    assert mgr.allocate("c", len(PROMPT))
    mgr.cache_blocks("c", PROMPT, len(PROMPT))
    assert mgr.block_table("c") == [1, 2, 3]
    assert mgr.match_prefix("d", PROMPT) == 8  # a device hit again, on the fetched blocks
    assert mgr.block_table("d") == [1, 2]
    mgr.check_integrity()
    mgr.free("c")
    mgr.free("d")
    assert (mgr.num_free_blocks, mgr.num_free_host_blocks) == (7, 4)
    mgr.check_integrity()


def test_an_aborted_step_stores_no_offload_and_leaves_no_fetched_block_findable():
    mgr = make_manager()
    assert cached_then_evicted(mgr, rank=2.0) == [(2, 0), (1, 1)]
    mgr.abort_step()  # the copies of a's blocks to host blocks 0 and 1 may not have run
    mgr.check_integrity()
    assert (mgr.host_pool.num_cached, mgr.num_free_host_blocks) == (0, 4)
    mgr.end_step()  # the next step stores nothing either
    assert (mgr.host_pool.num_cached, mgr.num_free_host_blocks) == (0, 4)
    assert [host_block_of(mgr, PROMPT, i) for i in (0, 1)] == [None, None]
    mgr.free("b")
    mgr.check_integrity()

    # A fetch whose step aborts: the device blocks leave the index, the host copies go.
    mgr = make_manager()
    cached_then_evicted(mgr, rank=2.0)
    mgr.end_step()  # this time the offloads ran: a's blocks are host-cached
    mgr.free("b")
    assert mgr.match_prefix("c", PROMPT) == 0
    assert mgr.fetch_prefix("c", PROMPT, 2) == [(1, 1), (0, 2)]
    assert mgr.pool.is_cached(1) and mgr.pool.is_cached(2)
    mgr.abort_step()
    mgr.check_integrity()
    assert not mgr.pool.is_cached(1) and not mgr.pool.is_cached(2)
    assert (mgr.host_pool.num_cached, mgr.num_free_host_blocks) == (0, 4)
    mgr.free("c")  # the unwritten blocks go back plain, findable nowhere
    mgr.check_integrity()
    assert (mgr.pool.num_cached_free, mgr.num_free_blocks) == (0, 7)
    assert mgr.match_prefix("d", PROMPT) == 0 and mgr.host_prefix_blocks("d", PROMPT) == 0
    mgr.free("d")
    mgr.check_integrity()


@pytest.mark.parametrize("rank, offloaded", [(0.0, False), (0.5, False), (1.0, True),
                                             (2.0, True)])
def test_only_ranks_at_or_above_the_minimum_are_offloaded(rank, offloaded):
    mgr = make_manager(min_rank=1.0)
    assert cached_then_evicted(mgr, rank) == ([(2, 0), (1, 1)] if offloaded else [])
    mgr.end_step()
    assert (mgr.num_offloaded_blocks, mgr.host_pool.num_cached) == \
        ((2, 2) if offloaded else (0, 0))
    mgr.free("b")
    assert mgr.match_prefix("c", PROMPT) == 0
    assert mgr.host_prefix_blocks("c", PROMPT) == (2 if offloaded else 0)
    mgr.check_integrity()


def test_without_offload_or_host_blocks_nothing_is_offloaded():
    plain = KVCacheManager(8, BLOCK, 4, enable_prefix_caching=True)  # never enabled
    no_host = make_manager(num_host_blocks=0)
    assert no_host.offload_min_rank is None
    for mgr in (plain, no_host):
        assert cached_then_evicted(mgr, rank=5.0) == []
        mgr.end_step()
        assert (mgr.num_offloaded_blocks, mgr.host_pool.num_cached) == (0, 0)
        mgr.check_integrity()


def test_a_full_host_pool_drops_the_rest_and_a_tail_without_its_head_is_no_hit():
    mgr = make_manager(num_host_blocks=1)
    assert cached_then_evicted(mgr, rank=2.0) == [(2, 0)]  # the tail got the one host block
    mgr.end_step()
    assert [host_block_of(mgr, PROMPT, i) for i in (0, 1)] == [None, 0]
    mgr.free("b")
    assert mgr.match_prefix("c", PROMPT) == 0
    assert mgr.host_prefix_blocks("c", PROMPT) == 0
    mgr.check_integrity()


def test_a_device_hit_continues_on_the_host():
    mgr = make_manager(num_blocks=6)
    prefill(mgr, "a", PROMPT)  # [1, 2, 3]
    mgr.free("a", owner="A", rank=2.0)  # plain: 4 5 3; cached: 2, 1
    assert mgr.allocate("b", 4 * BLOCK)
    assert mgr.block_table("b") == [4, 5, 3, 2]
    assert mgr.take_offloads() == [(2, 0)]  # block 1 of the prefix; block 0 stays on device
    mgr.end_step()
    mgr.free("b")
    assert mgr.match_prefix("c", PROMPT) == 4
    assert mgr.block_table("c") == [1]
    assert mgr.host_prefix_blocks("c", PROMPT) == 1
    assert mgr.fetch_prefix("c", PROMPT, 1) == [(0, 2)]
    assert mgr.block_table("c") == [1, 2]
    mgr.check_integrity()
    mgr.end_step()
    mgr.check_integrity()


def test_fetch_prefix_short_of_device_blocks_changes_nothing():
    mgr = make_manager()
    cached_then_evicted(mgr, rank=2.0)
    mgr.end_step()  # b still holds every device block
    assert mgr.match_prefix("c", PROMPT) == 0
    assert mgr.fetch_prefix("c", PROMPT, 2) is None
    assert (mgr.block_table("c"), mgr.host_pool.num_cached, mgr.num_fetched_blocks) == ([], 2, 0)
    mgr.check_integrity()
    with pytest.raises(ValueError, match="block 2 of its prefix is not on host"):
        mgr.fetch_prefix("c", PROMPT + [1, 2, 3, 4], 3)


def test_recomputing_a_host_cached_block_drops_the_host_copy():
    mgr = make_manager()
    cached_then_evicted(mgr, rank=2.0)
    mgr.end_step()
    mgr.free("b")
    assert prefill(mgr, "c", PROMPT) == 0  # computed again instead of fetched
    assert (mgr.host_pool.num_cached, mgr.num_free_host_blocks) == (0, 4)
    assert [host_block_of(mgr, PROMPT, i) for i in (0, 1)] == [None, None]
    mgr.check_integrity()


def test_the_host_tier_evicts_its_lowest_rank_first_and_set_rank_moves_both_tiers():
    mgr = make_manager(num_host_blocks=2)
    prompt_a, prompt_b = [1, 2, 3, 4, 5], [6, 7, 8, 9, 10]
    prefill(mgr, "a", prompt_a)  # [1, 2]
    prefill(mgr, "b", prompt_b)  # [3, 4]
    mgr.free("a", owner="A", rank=2.0)
    mgr.free("b", owner="B", rank=3.0)  # plain: 5 6 7 2 4; cached: 1 (rank 2), 3 (rank 3)
    assert mgr.allocate("x", 7 * BLOCK)
    assert mgr.take_offloads() == [(1, 0), (3, 1)]
    mgr.end_step()
    mgr.free("x")
    mgr.set_rank("A", 4.0)  # A's host copy now outranks B's
    assert mgr.allocate("y", 1)
    assert mgr.swap_out(["y"]) == [(3, 1)]  # host block 1 (B's, rank 3) is dropped for it
    assert (host_block_of(mgr, prompt_a, 0), host_block_of(mgr, prompt_b, 0)) == (0, None)
    mgr.check_integrity()


def test_check_integrity_catches_host_blocks_freed_or_taken_behind_its_back():
    mgr = make_manager()
    cached_then_evicted(mgr, rank=2.0)
    mgr.end_step()
    mgr.free("b")
    mgr.match_prefix("c", PROMPT)
    assert mgr.fetch_prefix("c", PROMPT, 1) == [(1, 1)]  # host block 1 is read this step
    mgr.check_integrity()
    with pytest.raises(KVCacheIntegrityError, match="host block 0: freed but not held"):
        mgr.host_pool.free([0])  # cached, not held
    mgr.host_pool.free([1])  # the in-flight block, freed early
    with pytest.raises(KVCacheIntegrityError, match="host block 1: held set disagrees"):
        mgr.check_integrity()
    with pytest.raises(KVCacheIntegrityError, match="host block 1: freed but not held"):
        mgr.end_step()  # its second free

    other = make_manager()
    cached_then_evicted(other, rank=2.0)
    other.end_step()
    other.host_pool.take(0)
    with pytest.raises(KVCacheIntegrityError, match="host block 0: held set disagrees"):
        other.check_integrity()


def random_kv(num_blocks: int) -> torch.Tensor:
    spec = KVCacheSpec(num_blocks=num_blocks, num_layers=2, block_size=BLOCK, num_kv_heads=2,
                       head_dim=8, dtype=torch.float32)
    kv = allocate_kv_cache(spec, "cpu")
    kv.copy_(torch.randn(kv.shape, generator=torch.Generator().manual_seed(0)))
    return kv


def test_offloaded_and_fetched_bytes_are_bit_exact():
    mgr = make_manager()
    kv = random_kv(8)
    original = kv.clone()
    swapper = BulkSwapper(kv, num_host_blocks=4)

    offloads = cached_then_evicted(mgr, rank=2.0)
    assert offloads == [(2, 0), (1, 1)]
    swapper.swap_out(offloads)  # the step's device-to-host copies run first...
    kv[1:] = -1.0  # ...then b's prefill overwrites every device block
    mgr.end_step()
    mgr.free("b")  # plain: 1 2 3 7 6 5 4
    assert mgr.allocate("z", 2 * BLOCK) and mgr.block_table("z") == [1, 2]

    assert mgr.match_prefix("c", PROMPT) == 0
    fetches = mgr.fetch_prefix("c", PROMPT, 2)
    assert fetches == [(1, 3), (0, 7)]
    swapper.swap_in(fetches)
    mgr.end_step()
    assert torch.equal(kv[3], original[1]) and torch.equal(kv[7], original[2])
    assert torch.equal(kv[0], original[0])
    assert (kv[[1, 2, 4, 5, 6]] == -1.0).all()
    assert (swapper.num_copies, swapper.num_blocks_out, swapper.num_blocks_in) == (2, 2, 2)
    mgr.check_integrity()


def test_a_hash_is_never_cached_on_both_tiers_after_a_swap_in():
    """A swapped call's own freed cached blocks are evicted by its swap-in (and offloaded);
    its swapped-in copies are then registered on the device in the same step, while the
    offloads are stored on the host at `end_step`: the same hashes end up on both tiers."""
    mgr = make_manager(num_blocks=6, num_host_blocks=8)
    prefill(mgr, "a", PROMPT)  # [1, 2, 3]
    assert mgr.swap_out(["a"], owner="A", rank=2.0) == [(1, 0), (2, 1), (3, 2)]
    mgr.end_step()
    assert mgr.allocate("x", 2 * BLOCK)  # [4, 5]: only 3 and the cached 2, 1 are left
    assert mgr.swap_in(["a"]) == [(0, 3), (1, 2), (2, 1)]
    assert mgr.take_offloads() == [(2, 3), (1, 4)]  # a's own cached copies, offloaded
    mgr.cache_blocks("a", PROMPT, len(PROMPT))
    mgr.end_step()
    mgr.check_integrity()  # passes: each tier is consistent on its own
    on_device = [mgr.pool.has_hash(h) for h in chain(PROMPT)]
    on_host = [host_block_of(mgr, PROMPT, i) for i in (0, 1)]
    assert on_device == [True, True]
    assert on_host == [None, None]


def test_a_fetch_whose_allocation_offloads_never_evicts_its_own_source():
    mgr = make_manager(num_blocks=5, num_host_blocks=2)  # 4 usable device blocks
    prompt_p, prompt_q, prompt_r = [1, 2, 3, 4, 5], [6, 7, 8, 9, 10], [11, 12, 13, 14, 15]
    prefill(mgr, "a", prompt_p)  # [1, 2]
    mgr.free("a", owner="A", rank=2.0)
    prefill(mgr, "q", prompt_q)  # [3, 4]
    mgr.free("q", owner="Q", rank=3.0)
    assert mgr.allocate("x", 4 * BLOCK)
    assert mgr.take_offloads() == [(1, 0), (3, 1)]  # the host is now full of cached blocks
    mgr.end_step()
    mgr.free("x")
    prefill(mgr, "r", prompt_r)  # [3, 1]
    mgr.free("r", owner="R", rank=5.0)
    assert mgr.allocate("y", 3 * BLOCK)  # [4, 2, 1]: only R's cached block 3 is left
    assert mgr.match_prefix("c", prompt_p) == 0
    assert mgr.host_prefix_blocks("c", prompt_p) == 1  # host block 0 (rank 2, the lowest)
    # Taking device block 3 offloads R's block (rank 5): the host must drop Q's block 1 for
    # it, not host block 0, which this fetch is about to read.
    assert mgr.fetch_prefix("c", prompt_p, 1) == [(0, 3)]
    assert mgr.take_offloads() == [(3, 1)]
    mgr.check_integrity()
