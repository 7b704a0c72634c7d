"""KV events (`kvcache.cache_events`): the device prefix cache logs each block hash it
indexes and forgets; a reader's digests keep an exact copy of it (random workloads with
eviction), net per hash, and reset when the log no longer reaches back or the epoch is
another one."""

import random

import pytest

from kvcache import KVCacheManager
from kvcache.cache_events import CacheDigest, CacheEvents, CacheView, wire_hash
from kvcache.prefix_hash import hash_block

BLOCK = 4


def prefill(mgr: KVCacheManager, call_id: str, tokens: list[int]) -> bool:
    mgr.match_prefix(call_id, tokens)
    if not mgr.allocate(call_id, len(tokens)):
        mgr.free(call_id)
        return False
    mgr.cache_blocks(call_id, tokens, len(tokens))
    return True


def cached_now(mgr: KVCacheManager) -> set[int]:
    """The wire hashes the device cache indexes (read through a reset digest)."""
    return set(mgr.pool.cache_digest(-1, 0).stored)


def chain(tokens: list[int]) -> list[int]:
    hashes, parent = [], None
    for start in range(0, len(tokens) - BLOCK + 1, BLOCK):
        parent = hash_block(parent, tokens[start:start + BLOCK])
        hashes.append(wire_hash(parent))
    return hashes


def test_a_readers_view_follows_the_cache_exactly_through_eviction():
    rng = random.Random(7)
    mgr = KVCacheManager(24, BLOCK, 0, enable_prefix_caching=True)
    view = CacheView()
    prefixes = [[rng.randrange(1000) for _ in range(12)] for _ in range(4)]
    live: list[str] = []
    for step in range(300):
        if live and (rng.random() < 0.45 or mgr.num_free_blocks < 6):
            mgr.free(live.pop(rng.randrange(len(live))), rank=rng.random())
        else:
            tokens = rng.choice(prefixes) + [rng.randrange(1000) for _ in range(rng.randrange(9))]
            if prefill(mgr, f"c{step}", tokens):
                live.append(f"c{step}")
        if step % 7 == 0:
            view.apply(mgr.pool.cache_digest(view.epoch, view.next))
            assert view.hashes == cached_now(mgr)
    view.apply(mgr.pool.cache_digest(view.epoch, view.next))
    assert view.hashes == cached_now(mgr)
    assert any(h in view.hashes for h in chain(prefixes[0]))


def test_a_digest_is_the_net_change_and_the_first_is_a_reset():
    mgr = KVCacheManager(8, BLOCK, 0, enable_prefix_caching=True)
    first = mgr.pool.cache_digest(0, 0)
    assert (first.reset, first.stored, first.removed, first.next) == (True, (), (), 0)
    tokens = list(range(100, 112))
    assert prefill(mgr, "a", tokens)
    digest = mgr.pool.cache_digest(first.epoch, first.next)
    assert (digest.reset, list(digest.stored), digest.removed) == (False, chain(tokens), ())
    mgr.free("a")
    assert mgr.allocate("b", 7 * BLOCK)  # evicts all three cached blocks
    later = mgr.pool.cache_digest(digest.epoch, digest.next)
    assert (later.reset, later.stored, sorted(later.removed)) == (
        False, (), sorted(chain(tokens)))
    assert mgr.pool.cache_digest(first.epoch, first.next).stored == ()  # stored, then removed


def test_a_reader_too_far_behind_or_of_another_epoch_gets_a_reset():
    events = CacheEvents(capacity=3)
    for h in (1, 2, 3, 4):
        events.stored(h)
    cached = lambda: [2, 3, 4]  # noqa: E731
    assert events.digest(events.epoch, 0, cached).reset  # events 0 was dropped from the log
    assert events.digest(events.epoch, 1, cached) == CacheDigest(events.epoch, 4, False,
                                                                 (2, 3, 4), ())
    assert events.digest(events.epoch + 1, 4, cached).stored == (2, 3, 4)
    assert events.digest(events.epoch, 5, cached).reset  # ahead of the log: a restart
    with pytest.raises(ValueError, match="capacity"):
        CacheEvents(capacity=0)


def test_a_digest_reads_only_the_events_after_the_readers_from_a_full_log():
    events = CacheEvents(capacity=5)
    for h in (1, 2, 3, 4, 5):
        events.stored(h)
    events.removed(3)
    events.stored(6)
    events.removed(6)
    events.stored(3)  # events 4..8 in the log: stored 5, removed 3, stored and removed 6, stored 3
    assert events.digest(events.epoch, 5, list).stored == (3,)  # removed 3, then stored it
    assert events.digest(events.epoch, 4, list) == CacheDigest(events.epoch, 9, False,
                                                               (5, 3), (6,))
    assert events.digest(events.epoch, 9, list) == CacheDigest(events.epoch, 9, False, (), ())
    assert events.digest(events.epoch, 3, list).reset  # event 3 has left the log


def test_wire_hashes_are_the_low_64_bits():
    assert wire_hash((5 << 64) + 9) == 9
    full = hash_block(None, [1, 2, 3, 4])
    assert wire_hash(full) == full % (1 << 64) < 1 << 64
