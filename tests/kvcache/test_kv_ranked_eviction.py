"""Ranked eviction of cached free blocks: lowest rank first, LRU inside a rank, uncached
blocks before any cached one, rank-bounded allocation, and what the eviction hook hears."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcache import BlockPool
from kvcache.errors import KVCacheIntegrityError
from kvcache.ranked_free_list import RankedFreeList


def tokens_of(block: int) -> tuple[int, ...]:
    """Made-up content of a block: two token ids derived from its id."""
    return (block * 10, block * 10 + 1)


def hash_of(block: int) -> int:
    return 1000 + block


def cached_pool(num_blocks: int) -> BlockPool:
    """A pool whose every usable block is allocated and registered under `hash_of(block)`."""
    pool = BlockPool(num_blocks)
    for block in pool.allocate(pool.num_usable):
        pool.register(block, hash_of(block), tokens_of(block))
    return pool


def evict_all(pool: BlockPool, max_rank: float = float("inf")) -> tuple[list[int], list[tuple]]:
    """Allocate blocks one at a time while any may be taken: the eviction order, and the
    hook's (block, hash, tokens, rank, owner) for each cached block taken."""
    heard: list[tuple] = []
    order: list[int] = []
    while pool.num_evictable(max_rank):
        order += pool.allocate(1, max_rank, lambda *args: heard.append(args))
    return order, heard


def test_lowest_rank_goes_first_and_lru_inside_a_rank():
    pool = cached_pool(8)  # blocks 1..7, all held and cached
    pool.free([1, 2], owner="a", rank=2.0)  # freed last first: rank 2 holds 2, 1
    pool.free([3, 4], owner="b", rank=1.0)  # rank 1: 4, 3
    pool.free([5, 6], owner="c", rank=3.0)  # rank 3: 6, 5
    pool.free([7], owner="a", rank=2.0)  # rank 2: 2, 1, 7
    assert [pool.free_rank(b) for b in range(1, 8)] == [2.0, 2.0, 1.0, 1.0, 3.0, 3.0, 2.0]
    assert (pool.num_free, pool.num_cached_free) == (7, 7)
    pool.check_integrity({})

    order, heard = evict_all(pool)
    assert order == [4, 3, 2, 1, 7, 6, 5]
    assert [(block, rank, owner) for block, _, _, rank, owner in heard] == [
        (4, 1.0, "b"), (3, 1.0, "b"), (2, 2.0, "a"), (1, 2.0, "a"), (7, 2.0, "a"),
        (6, 3.0, "c"), (5, 3.0, "c")]
    assert not any(pool.is_cached(b) for b in order)
    pool.check_integrity({b: 1 for b in range(1, 8)})


def test_eviction_hook_sees_block_hash_tokens_rank_owner_before_the_index_forgets():
    pool = cached_pool(4)
    pool.free([1, 2], owner=("prog", 7), rank=5.5)
    pool.free([3])  # no owner, rank 0
    seen = []

    def hook(block, block_hash, tokens, rank, owner):
        seen.append((block, block_hash, tokens, rank, owner,
                     pool.lookup(block_hash, tokens)))

    assert pool.allocate(3, on_evict=hook) == [3, 2, 1]
    assert seen == [
        (3, 1003, (30, 31), 0.0, None, 3),
        (2, 1002, (20, 21), 5.5, ("prog", 7), 2),
        (1, 1001, (10, 11), 5.5, ("prog", 7), 1),
    ]
    assert [pool.lookup(hash_of(b), tokens_of(b)) for b in (1, 2, 3)] == [None, None, None]
    pool.check_integrity({1: 1, 2: 1, 3: 1})


def test_uncached_blocks_always_go_before_cached_ones():
    pool = BlockPool(7)
    assert pool.allocate(6) == [1, 2, 3, 4, 5, 6]
    pool.register(2, hash_of(2), tokens_of(2))
    pool.register(4, hash_of(4), tokens_of(4))
    pool.free([2, 4], owner="a", rank=0.0)  # cached at the lowest rank, freed first
    pool.free([6, 1, 5])  # uncached, freed later: plain FIFO 5, 1, 6
    heard = []
    assert pool.allocate(3, on_evict=lambda *args: heard.append(args[0])) == [5, 1, 6]
    assert heard == [] and pool.num_cached_free == 2
    assert pool.allocate(2, on_evict=lambda *args: heard.append(args[0])) == [4, 2]
    assert heard == [4, 2]
    pool.check_integrity({b: 1 for b in range(1, 7)})


def test_set_rank_moves_every_free_block_of_an_owner():
    pool = cached_pool(8)
    for block in (1, 2, 3):
        pool.free([block], owner="a", rank=4.0)  # rank 4: 1, 2, 3
    pool.free([4, 5], owner="b", rank=2.0)  # rank 2: 5, 4
    pool.free([6], rank=1.0)  # no owner
    assert pool.set_rank("a", 1.0) == 3  # they become the most recent of rank 1
    assert [pool.free_rank(b) for b in (1, 2, 3, 4, 5, 6)] == [1.0, 1.0, 1.0, 2.0, 2.0, 1.0]
    assert pool.set_rank("a", 1.0) == 0  # already there
    assert pool.set_rank("nobody", 9.0) == 0
    assert pool.set_rank(None, 9.0) == 0  # ownerless blocks are never re-ranked
    pool.check_integrity({7: 1})
    order, _ = evict_all(pool)
    assert order == [6, 1, 2, 3, 5, 4]


def test_set_rank_leaves_blocks_already_at_the_rank_in_place():
    pool = cached_pool(6)
    pool.free([1], owner="a", rank=3.0)
    pool.free([2], owner="b", rank=3.0)
    pool.free([3], owner="a", rank=1.0)
    pool.free([4], owner="a", rank=2.0)
    assert pool.set_rank("a", 3.0) == 2  # 1 stays first at rank 3; 3 and 4 join after 2
    order, _ = evict_all(pool)
    assert order == [1, 2, 3, 4]
    pool.check_integrity({1: 1, 2: 1, 3: 1, 4: 1, 5: 1})


def test_incref_revives_a_ranked_block_and_a_later_free_ranks_it_anew():
    pool = cached_pool(6)
    for block in (1, 2, 3):
        pool.free([block], owner="a", rank=2.0)  # rank 2: 1, 2, 3
    pool.incref([2])
    assert (pool.ref_count(2), pool.free_rank(2), pool.is_cached(2)) == (1, None, True)
    assert (pool.num_free, pool.num_cached_free, pool.num_evictable()) == (2, 2, 2)
    assert pool.set_rank("a", 5.0) == 2  # a held block is no longer the owner's free block
    pool.check_integrity({2: 1, 4: 1, 5: 1})
    pool.free([2], owner="b", rank=1.0)
    assert pool.free_rank(2) == 1.0
    order, heard = evict_all(pool)
    assert order == [2, 1, 3]
    assert [(h[0], h[3], h[4]) for h in heard] == [(2, 1.0, "b"), (1, 5.0, "a"), (3, 5.0, "a")]
    pool.check_integrity({b: 1 for b in range(1, 6)})


def test_counted_owners_blocks_leave_the_count_when_evicted_revived_or_unregistered():
    pool = cached_pool(8)
    pool.free([1, 2, 3], owner="a", rank=2.0)
    pool.free([4], owner="b", rank=1.0)
    pool.set_counted("a", True)
    assert (pool.num_counted_free, pool.num_cached_free_of("a")) == (3, 3)
    pool.set_counted("a", True)  # again: no change
    pool.free([5], owner="a", rank=2.0)  # joins the count
    pool.set_rank("a", 3.0)  # re-ranking keeps it
    assert pool.num_counted_free == 4
    pool.incref([2])  # revived
    pool.unregister(3)  # its content is not what the index says: plain free now
    assert (pool.num_counted_free, pool.is_cached(3), pool.free_rank(3)) == (2, False, None)
    assert pool.allocate(2) == [3, 4]  # the plain block, then b's (lowest rank)
    assert pool.allocate(1) == [1]  # evicted: a's least recently freed left
    assert pool.num_counted_free == 1  # block 5
    pool.set_counted("a", False)
    assert (pool.num_counted_free, pool.num_cached_free_of("a")) == (0, 1)
    pool.check_integrity({1: 1, 2: 1, 3: 1, 4: 1, 6: 1, 7: 1})


def test_allocate_up_to_a_rank_refuses_when_only_higher_ranks_are_left():
    pool = cached_pool(8)
    pool.free([7])  # rank 0
    pool.free([1, 2], owner="a", rank=1.0)
    pool.free([3, 4, 5], owner="b", rank=3.0)
    assert [pool.num_evictable(r) for r in (0.0, 0.5, 1.0, 2.9, 3.0, float("inf"))] == \
        [1, 1, 3, 3, 6, 6]
    before = {b: pool.free_rank(b) for b in range(1, 8)}
    heard = []
    assert pool.allocate(4, max_rank=1.0, on_evict=lambda *args: heard.append(args)) is None
    assert pool.allocate(2, max_rank=0.0, on_evict=lambda *args: heard.append(args)) is None
    assert heard == []
    assert {b: pool.free_rank(b) for b in range(1, 8)} == before
    assert all(pool.lookup(hash_of(b), tokens_of(b)) == b for b in range(1, 8))
    pool.check_integrity({6: 1})

    assert pool.allocate(3, max_rank=1.0) == [7, 2, 1]  # a rank equal to the bound may go
    assert pool.allocate(1, max_rank=2.9) is None
    assert pool.num_evictable(2.9) == 0 and pool.num_evictable() == 3
    assert pool.allocate(3) == [5, 4, 3]
    pool.check_integrity({b: 1 for b in range(1, 8)})


def test_ranked_free_list_counts_and_orders_without_a_pool():
    free = RankedFreeList()
    assert free.lowest() is None and free.count_at_most(float("inf")) == 0
    free.add(5, 2.0, "x")
    free.add(3, 1.0)
    free.add(9, 2.0, "x")
    free.add(4, 1.0, "y")
    assert (len(free), 9 in free, 8 in free) == (4, True, False)
    assert [free.count_at_most(r) for r in (0.0, 1.0, 2.0)] == [0, 2, 4]
    assert free.lowest() == (3, 1.0)
    assert (free.owner_of(5), free.owner_of(3), free.rank_of(4)) == ("x", None, 1.0)
    with pytest.raises(ValueError, match="block 5"):
        free.add(5, 0.0)
    with pytest.raises(ValueError, match="block 9"):
        free.add_many([1, 9], 0.0)
    with pytest.raises(ValueError, match="listed twice"):
        free.add_many([1, 2, 1], 0.0)
    assert 1 not in free and 2 not in free
    for bad in ([5, 7], [5, 5]):
        with pytest.raises(KeyError):
            free.remove_many(bad)
        assert 5 in free
    free.remove(3)
    with pytest.raises(KeyError):
        free.remove(3)
    assert free.set_rank("x", 0.5) == 2
    assert free.lowest() == (5, 0.5)
    order = []
    while free.lowest() is not None:
        order.append(free.lowest())
        free.remove(order[-1][0])
    assert order == [(5, 0.5), (9, 0.5), (4, 1.0)]
    assert free.set_rank("x", 1.0) == 0  # owners forget blocks that left the list


def test_set_rank_keeps_the_tail_first_eviction_order_of_a_freed_table():
    """`free` releases a table last block first so that tails go before heads (a chain
    without its head is no hit); re-ranking the owner's blocks should keep that order."""
    pool = cached_pool(5)
    pool.free([1, 2, 3], owner="a", rank=3.0)  # tail first: 3, 2, 1
    assert pool.set_rank("a", 1.0) == 3  # e.g. its retention expired
    order, _ = evict_all(pool)
    pool.check_integrity({1: 1, 2: 1, 3: 1, 4: 1})
    assert order == [3, 2, 1]


class NaiveFreeList:
    """The list's contract, spelled out slowly: every block with its rank, owner, add time
    and the time it entered its rank; eviction order is (rank, time entered)."""

    def __init__(self) -> None:
        self.blocks: dict[int, list] = {}  # block -> [rank, owner, added, entered]
        self.clock = 0

    def tick(self) -> int:
        self.clock += 1
        return self.clock

    def add(self, block, rank, owner):
        now = self.tick()
        self.blocks[block] = [rank, owner, now, now]

    def set_rank(self, owner, rank) -> int:
        moving = sorted((b for b, e in self.blocks.items() if e[1] == owner and owner is not None
                         and e[0] != rank), key=lambda b: self.blocks[b][2])
        for block in moving:
            self.blocks[block][0], self.blocks[block][3] = rank, self.tick()
        return len(moving)

    def order(self) -> list[int]:
        return sorted(self.blocks, key=lambda b: (self.blocks[b][0], self.blocks[b][3]))


# Adds and re-ranks weigh most, so owners often hold runs at several ranks (merged on a
# re-rank) and runs often follow other owners' runs.
OPS = st.lists(st.tuples(st.sampled_from(["add"] * 3 + ["set_rank"] * 2 +
                                         ["add_many", "remove", "remove_many", "evict",
                                          "count"]),
                         st.integers(0, 7), st.sampled_from([0.0, 1.0, 2.5]),
                         st.sampled_from([None, "a", "b"])), max_size=60)


@settings(max_examples=400, deadline=None)
@given(OPS)
def test_runs_evict_in_the_order_of_the_naive_contract(ops):
    """Random adds, removes, re-ranks (runs moved whole or merged), evictions and counts:
    the same eviction order, ranks, owners and counts as the naive model at every step."""
    free, naive = RankedFreeList(), NaiveFreeList()
    free.set_counted("a", True)
    for op, block, rank, owner in ops:
        if op == "add" and block not in naive.blocks:
            free.add(block, rank, owner)
            naive.add(block, rank, owner)
        elif op == "add_many":  # the free blocks among block, block + 1, block + 2
            run = [b for b in range(block, block + 3) if b not in naive.blocks]
            free.add_many(run, rank, owner)
            for b in run:
                naive.add(b, rank, owner)
        elif op == "remove" and block in naive.blocks:
            free.remove(block)
            del naive.blocks[block]
        elif op == "set_rank":
            assert free.set_rank(owner, rank) == naive.set_rank(owner, rank)
        elif op == "remove_many":  # the blocks here among block + 2, block + 1, block
            taken = [b for b in range(block + 2, block - 1, -1) if b in naive.blocks]
            free.remove_many(taken)
            for b in taken:
                del naive.blocks[b]
        elif op == "evict" and naive.blocks:
            lowest = naive.order()[0]
            assert free.lowest() == (lowest, naive.blocks[lowest][0])
            free.remove(lowest)
            del naive.blocks[lowest]
        elif op == "count":
            assert free.count_at_most(rank) == sum(e[0] <= rank for e in naive.blocks.values())
        assert sorted(free) == sorted(naive.blocks) and len(free) == len(naive.blocks)
        for who in ("a", "b"):
            assert free.count_of(who) == sum(e[1] == who for e in naive.blocks.values())
        assert free.num_counted == free.count_of("a")
        free.check_integrity()
    for block, (rank, owner, _, _) in naive.blocks.items():
        assert (free.rank_of(block), free.owner_of(block)) == (rank, owner)
    drained = []
    while free.lowest() is not None:
        drained.append(free.lowest()[0])
        free.remove(drained[-1])
    assert drained == naive.order()


def test_the_free_lists_integrity_check_sees_a_wrong_count():
    free = RankedFreeList()
    free.add_many([1, 2, 3], 1.0, "a")
    free.add(4, 0.0)
    free.check_integrity()
    free._size_at[1.0] += 1  # a stale per-rank size: eviction bounds would be wrong
    with pytest.raises(KVCacheIntegrityError, match="rank sizes"):
        free.check_integrity()
