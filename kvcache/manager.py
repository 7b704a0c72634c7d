"""Per-call block tables over the device and host pools: what the scheduler talks to."""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

from kvcache.block_pool import BlockPool
from kvcache.errors import KVCacheIntegrityError
from kvcache.host_pool import HostBlockPool
from kvcache.prefix_hash import BlockHashMemo, hash_block

MAX_HASH_MEMO = 1 << 17  # block hashes the manager's memo keeps, at most


@dataclass
class _CallBlocks:
    """One call's blocks: on device (`device`) or, when `swapped`, on host (`host`)."""

    device: list[int] = field(default_factory=list)
    host: list[int] = field(default_factory=list)
    swapped: bool = False
    hashes: list[int] = field(default_factory=list)  # chain hashes of its first full blocks
    num_registered: int = 0  # leading device blocks already offered to the prefix index
    num_dropped: int = 0  # leading blocks released past the attention window (null in `device`)

    @property
    def held(self) -> list[int]:
        """The device blocks it holds a ref on (its table less the dropped ones)."""
        return self.device[self.num_dropped:]


@dataclass(frozen=True)
class _Offload:
    """A cached device block being copied to `host_block` this step."""

    device_block: int
    host_block: int
    block_hash: int
    token_ids: tuple[int, ...]
    rank: float
    owner: Hashable


class KVCacheManager:
    """Maps opaque call ids to block tables; the only writer of the pools it owns.

    Device block 0 is the reserved null block. A call owns one ref on each block of its table
    (prefix-cache hits share blocks across calls) until `free` or `swap_out`. A swapped call
    owns host blocks instead, one per former device block, and keeps its chain hashes.

    Two tiers of prefix cache: freed cached blocks stay findable on the device, ranked by the
    caller (`free(..., owner, rank)`, `set_rank`); once `enable_offload(min_rank)`, a cached
    block of rank >= `min_rank` that an allocation evicts is copied to a host block instead
    of being dropped, and `fetch_prefix` copies such blocks back for a later hit (`prefetch`:
    before any call asks for them). A hash is cached on at most one tier at a time.

    Sliding-window attention (`attention_window` > 0: every layer sees only that many latest
    keys): `drop_outside_window` releases a call's leading blocks that no later token of it
    can see and puts the null block in their place in its table (the kernels never read
    blocks wholly before a window). Dropped blocks go to the prefix cache like freed ones
    (ownerless, rank 0: evicted first) and stay findable until evicted; since a prefix hit
    needs every block from the first, a later call sharing the history hits only while they
    last, and recomputes from the first evicted one. A dropped block is never swapped out.

    Nothing here touches tensors: `swap_out`, `swap_in`, `fetch_prefix` and `take_offloads`
    return the copies the executor must make in the same step, before anything else writes
    those blocks (device-to-host copies first). Host blocks read by this step's copies, and
    host blocks being written by its offloads, are held until `end_step` (call it once the
    step has run), so no copy of a step can clobber another. A step that failed calls
    `abort_step` instead: nothing its copies were to write is ever served (its offloads are
    not stored, the blocks it fetched leave the prefix index).
    """

    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        num_host_blocks: int = 0,
        enable_prefix_caching: bool = False,
        attention_window: int = 0,
    ) -> None:
        if num_blocks < 2:
            raise ValueError(f"num_blocks must be >= 2 (block 0 is null), got {num_blocks}")
        if block_size <= 0:
            raise ValueError(f"block_size must be positive, got {block_size}")
        if num_host_blocks < 0:
            raise ValueError(f"num_host_blocks must be >= 0, got {num_host_blocks}")
        if attention_window < 0:
            raise ValueError(f"attention_window must be >= 0, got {attention_window}")
        self.block_size = block_size
        self.attention_window = attention_window
        self.enable_prefix_caching = enable_prefix_caching
        self.offload_min_rank: float | None = None
        self.pool = BlockPool(num_blocks, reserve_null_block=True)
        self.host_pool = HostBlockPool(num_host_blocks)
        self._calls: dict[Hashable, _CallBlocks] = {}
        # Chain hashes outlive the calls that computed them, for as many blocks as both
        # tiers can cache, at most MAX_HASH_MEMO (about 40 MB); a miss only costs a hash.
        self._hash_memo = BlockHashMemo(min(num_blocks + num_host_blocks, MAX_HASH_MEMO))
        self._offloaded: list[_Offload] = []  # this step's; stored on host at end_step
        self._num_offloads_taken = 0  # of them, copies handed to the plan already
        self._host_in_flight: list[int] = []  # host blocks read by this step's copies
        self._fetched: list[int] = []  # device blocks fetch_prefix indexed this step
        self.num_offloaded_blocks = 0
        self.num_fetched_blocks = 0
        self.num_prefetched_blocks = 0

    def enable_offload(self, min_rank: float) -> None:
        """From now on, evicted cached blocks of rank >= `min_rank` are copied to host blocks
        (no effect without prefix caching or host blocks)."""
        if self.enable_prefix_caching and self.host_pool.num_blocks > 0:
            self.offload_min_rank = min_rank

    @property
    def num_free_blocks(self) -> int:
        return self.pool.num_free

    @property
    def num_cacheable_tokens(self) -> int:
        """Tokens both tiers can hold: usable device blocks and host blocks."""
        return (self.pool.num_usable + self.host_pool.num_blocks) * self.block_size

    @property
    def num_free_host_blocks(self) -> int:
        return self.host_pool.num_free

    def num_evictable_blocks(self, max_rank: float = float("inf")) -> int:
        """Device blocks an allocation limited to `max_rank` may take."""
        return self.pool.num_evictable(max_rank)

    def block_table(self, call_id: Hashable) -> list[int]:
        """The call's device block ids in order ([] if it has none), as a read-only view: do
        not modify it. It may grow while the call runs; swap-out and free leave it as it was
        (the manager starts a new list), so a plan built from it stays valid for its step."""
        state = self._calls.get(call_id)
        return state.device if state else []

    def is_swapped(self, call_id: Hashable) -> bool:
        state = self._calls.get(call_id)
        return state is not None and state.swapped

    def num_cached_blocks_of(self, call_id: Hashable) -> int:
        """Blocks of the call's device table registered in the prefix index (those a free
        leaves findable)."""
        state = self._calls.get(call_id)
        return max(0, min(state.num_registered, len(state.device)) - state.num_dropped) \
            if state else 0

    def num_kept_blocks_of(self, owner: Hashable) -> int:
        """Device blocks that frees left cached under `owner` and nothing has evicted or
        revived since (what keeping `owner`'s KV really holds of the device)."""
        return self.pool.num_cached_free_of(owner)

    @property
    def num_retained_blocks(self) -> int:
        """Device blocks kept (see `num_kept_blocks_of`) for the owners marked retained."""
        return self.pool.num_counted_free

    def set_retained(self, owner: Hashable, retained: bool) -> None:
        """Mark `owner` retained (its kept device blocks, now and later, count in
        `num_retained_blocks`) or not."""
        self.pool.set_counted(owner, retained)

    def num_host_blocks_of(self, call_id: Hashable) -> int:
        state = self._calls.get(call_id)
        return len(state.host) if state else 0

    def blocks_needed(self, call_id: Hashable, num_tokens: int) -> int:
        """New device blocks needed for the table to cover `num_tokens` tokens."""
        if num_tokens < 0:
            raise ValueError(f"num_tokens must be >= 0, got {num_tokens}")
        state = self._calls.get(call_id)
        return max(0, -(-num_tokens // self.block_size) - (len(state.device) if state else 0))

    def match_prefix(self, call_id: Hashable, token_ids: Sequence[int],
                     hashes: list[int] | None = None) -> int:
        """Adopt the longest run of device-cached full blocks of `token_ids` as the call's table.

        For a call without blocks. The hit leaves at least one token to compute, so it covers
        at most `len(token_ids) - 1` tokens, in whole blocks. Each hit block gains one ref
        (cached free blocks are revived). Returns the number of cached tokens; 0, changing
        nothing, when prefix caching is off.

        `hashes`: a list the caller keeps with this call across frees (a waiting call may be
        matched and released many times), holding the chain hashes of its first full blocks;
        the manager reads and extends it in place instead of hashing them again. Pass it only
        for the token ids it was made for (they may grow, never change).
        """
        if not self.enable_prefix_caching:
            return 0
        state = self._calls.setdefault(call_id, _CallBlocks())
        if state.device or state.swapped:
            raise ValueError(f"call_id {call_id!r} already has blocks")
        if hashes is not None:
            state.hashes = hashes
        hits = self._cached_run(self.pool, state, token_ids, 0, self._max_hit_blocks(token_ids))
        self.pool.incref(hits)
        state.device = hits
        state.num_registered = len(hits)
        return len(hits) * self.block_size

    def host_prefix_blocks(self, call_id: Hashable, token_ids: Sequence[int]) -> int:
        """How many host-cached blocks continue the call's device prefix hit (within the same
        `len(token_ids) - 1` cap). Changes nothing but the call's cached chain hashes."""
        state = self._calls.get(call_id)
        if state is None or state.swapped or self.host_pool.num_cached == 0:
            return 0
        return len(self._cached_run(self.host_pool, state, token_ids, len(state.device),
                                    self._max_hit_blocks(token_ids)))

    def fetch_prefix(self, call_id: Hashable, token_ids: Sequence[int], num_blocks: int,
                     max_rank: float = float("inf")) -> list[tuple[int, int]] | None:
        """Move the next `num_blocks` host-cached blocks of the call's prefix (see
        `host_prefix_blocks`) onto fresh device blocks appended to its table, registered in the
        device index. Returns the (host_block, device_block) copies, or None, changing nothing,
        if the device is short of blocks of rank <= `max_rank`."""
        state = self._calls[call_id]
        first = len(state.device)
        host = self._cached_run(self.host_pool, state, token_ids, first, first + num_blocks)
        if len(host) < num_blocks:
            raise ValueError(f"call_id {call_id!r}: block {first + len(host)} of its prefix "
                             f"is not on host")
        if self.pool.num_evictable(max_rank) < num_blocks:
            return None
        device = self._copy_back(state, token_ids, host, first, max_rank)
        state.device = state.device + device
        state.num_registered = len(state.device)
        self.num_fetched_blocks += num_blocks
        return list(zip(host, device))

    def prefetch(self, owner: Hashable, token_ids: Sequence[int], rank: float,
                 max_rank: float = 0.0) -> list[tuple[int, int]]:
        """Copy back to the device the host-cached full blocks of `token_ids` that continue its
        device-cached prefix, as many as blocks of rank <= `max_rank` allow (default: free
        blocks and KV of rank 0 only, so a live program's KV is never evicted for it). They
        become cached free blocks of `owner` at `rank`, findable at once. Call it after the
        step's last allocation: a later one could evict them before their copy has run.
        Returns the (host_block, device_block) copies for this step ([] for none)."""
        if self.host_pool.num_cached == 0 or not self.enable_prefix_caching:
            return []
        state, end = _CallBlocks(), len(token_ids) // self.block_size
        first = len(self._cached_run(self.pool, state, token_ids, 0, end))
        host = self._cached_run(self.host_pool, state, token_ids, first, end)
        host = host[:self.pool.num_evictable(max_rank)]
        if not host:
            return []
        device = self._copy_back(state, token_ids, host, first, max_rank)
        self.pool.free(device, owner, rank)
        self.num_prefetched_blocks += len(host)
        return list(zip(host, device))

    def _copy_back(self, state: _CallBlocks, token_ids: Sequence[int], host: list[int],
                   first: int, max_rank: float) -> list[int]:
        """Take the host-cached `host` blocks (full blocks `first`, `first + 1`, ... of
        `token_ids`) onto fresh device blocks registered in the device index, for this step's
        copies (the caller checked that blocks of rank <= `max_rank` suffice)."""
        for block in host:  # claimed first, so the allocation's offloads cannot evict them
            self.host_pool.take(block)
        device = self.pool.allocate(len(host), max_rank, self._offload)
        size = self.block_size
        for i, d in enumerate(device, start=first):  # type: ignore[arg-type]
            self.pool.register(d, state.hashes[i], token_ids[i * size:(i + 1) * size])
        self._host_in_flight.extend(host)
        self._fetched.extend(device)  # type: ignore[arg-type]
        return device  # type: ignore[return-value]

    def allocate(self, call_id: Hashable, num_tokens: int,
                 max_rank: float = float("inf")) -> bool:
        """Grow the call's table to cover `num_tokens` tokens, evicting only cached free blocks
        of rank <= `max_rank`; False, changing nothing, if short.

        A partly filled last block is used up before a new block is taken.
        """
        state = self._calls.get(call_id)
        held = 0
        if state is not None:
            if state.swapped:
                raise ValueError(f"call_id {call_id!r} is swapped out")
            held = len(state.device)
        need = -(-num_tokens // self.block_size) - held
        if need <= 0:
            return True
        blocks = self.pool.allocate(need, max_rank, self._offload)
        if blocks is None:
            return False
        self._calls.setdefault(call_id, _CallBlocks()).device.extend(blocks)
        return True

    def allocate_table(self, call_id: Hashable, num_tokens: int,
                       max_rank: float = float("inf")) -> list[int] | None:
        """`allocate`, then the call's `block_table`: the table once it covers `num_tokens`
        tokens, or None, changing nothing, if blocks are short (the scheduler's hot path:
        a table that already covers them is returned at once)."""
        state = self._calls.get(call_id)
        if state is not None and not state.swapped and \
                -(-num_tokens // self.block_size) <= len(state.device):
            return state.device
        if not self.allocate(call_id, num_tokens, max_rank):
            return None
        return self.block_table(call_id)

    def cache_blocks(
        self, call_id: Hashable, token_ids: Sequence[int], num_computed_tokens: int
    ) -> None:
        """Offer each full block among the first `num_computed_tokens` of `token_ids` (the
        call's prompt plus generated tokens) to the prefix index, once per call; a host copy
        of a newly registered block is dropped. Idempotent; no-op when prefix caching is off."""
        if not self.enable_prefix_caching:
            return
        if not 0 <= num_computed_tokens <= len(token_ids):
            raise ValueError(
                f"num_computed_tokens must be in [0, {len(token_ids)}], got {num_computed_tokens}"
            )
        state = self._calls.get(call_id)
        if state is None or state.swapped:
            raise ValueError(f"call_id {call_id!r} has no device blocks")
        num_full = num_computed_tokens // self.block_size
        if num_full <= state.num_registered:  # the common case: no block filled since
            return
        if num_full > len(state.device):
            raise KVCacheIntegrityError(
                f"block table of {call_id!r}: {num_full} computed blocks but "
                f"{len(state.device)} allocated"
            )
        hashes = self._chain_hashes(state, token_ids, num_full)
        size, on_host = self.block_size, self.host_pool.num_cached > 0
        for i in range(max(state.num_registered, state.num_dropped), num_full):
            tokens = token_ids[i * size:(i + 1) * size]
            self.pool.register(state.device[i], hashes[i], tokens)
            if on_host:
                self.host_pool.discard_hash(hashes[i], tokens)
        state.num_registered = num_full

    def free(self, call_id: Hashable, owner: Hashable = None, rank: float = 0.0) -> None:
        """Release the call's device blocks (last first) or host blocks and forget the call.

        Cached device blocks whose ref reaches 0 stay findable until evicted, with `owner` and
        `rank` (see BlockPool.free). Unknown calls: no-op.
        """
        state = self._calls.pop(call_id, None)
        if state is None:
            return
        self.pool.free(state.held, owner, rank)
        self.host_pool.free(state.host)

    def drop_outside_window(self, call_id: Hashable, first_position: int) -> int:
        """Release the call's leading device blocks that lie wholly before the attention
        window of its token at `first_position` (the first it will compute), putting the null
        block in their place. Returns how many it released (0 without a window, for an unknown
        or swapped call, or when none is newly out of the window)."""
        state = self._calls.get(call_id)
        if not self.attention_window or state is None or state.swapped:
            return 0
        end = min(max(0, first_position - self.attention_window + 1) // self.block_size,
                  len(state.device))
        if end <= state.num_dropped:
            return 0
        released = state.device[state.num_dropped:end]
        self.pool.free(released)
        state.device = [self.pool.null_block] * end + state.device[end:]
        state.num_dropped = end
        return len(released)

    def set_rank(self, owner: Hashable, rank: float) -> None:
        """Re-rank the cached free blocks of `owner` on both tiers."""
        self.pool.set_rank(owner, rank)
        self.host_pool.set_rank(owner, rank)

    def swap_out(self, call_ids: Sequence[Hashable], owner: Hashable = None,
                 rank: float = 0.0) -> list[tuple[int, int]] | None:
        """Move the listed calls' blocks to host, all or none.

        Takes one host block per device block (None, changing nothing, if the host pool is
        short), drops the calls' device refs (a shared or cached block just loses one; cached
        ones freed stay findable with `owner` and `rank`) and returns the
        (device_block, host_block) copies to make before any device block is written again.
        """
        states = self._states(call_ids, swapped=False)
        device = [block for state in states for block in state.held]
        host = self.host_pool.allocate(len(device))
        if host is None:
            return None
        start = 0
        for state in states:
            end = start + len(state.held)
            self.pool.free(state.held, owner, rank)
            state.host, state.device = host[start:end], []
            state.swapped, state.num_registered = True, 0
            start = end
        return list(zip(device, host))

    def swap_in(self, call_ids: Sequence[Hashable],
                max_rank: float = float("inf")) -> list[tuple[int, int]] | None:
        """Bring the listed swapped calls back onto fresh device blocks, all or none.

        None, changing nothing, if device blocks (of rank <= `max_rank`) are short. Their host
        blocks are released at `end_step`; returns the (host_block, device_block) copies to
        make before those device blocks are read.
        """
        states = self._states(call_ids, swapped=True)
        host = [block for state in states for block in state.host]
        device = self.pool.allocate(len(host), max_rank, self._offload)
        if device is None:
            return None
        start = 0
        for state in states:
            end = start + len(state.host)
            self._host_in_flight.extend(state.host)
            state.device = [self.pool.null_block] * state.num_dropped + device[start:end]
            state.host = []
            state.swapped = False
            start = end
        return list(zip(host, device))

    def take_offloads(self) -> list[tuple[int, int]]:
        """The (device_block, host_block) copies of cached blocks evicted since the last call:
        add them to this step's device-to-host copies."""
        pairs = [(o.device_block, o.host_block)
                 for o in self._offloaded[self._num_offloads_taken:]]
        self._num_offloads_taken = len(self._offloaded)
        return pairs

    def end_step(self) -> None:
        """The step's copies have run: offloaded blocks become host-cached, and host blocks
        read by copies back to the device are free again."""
        for offload in self._offloaded:
            if self.pool.has_hash(offload.block_hash):  # back on the device this step
                self.host_pool.free([offload.host_block])
            else:
                self.host_pool.store(offload.host_block, offload.block_hash,
                                     offload.token_ids, offload.rank, offload.owner)
        self._release_step()

    def abort_step(self) -> None:
        """The step failed: its copies may not have run, in whole or in part. So its offloads
        are not stored (their host blocks are freed), the device blocks `fetch_prefix`
        indexed leave the prefix index (their holders still hold them; freed, they are plain
        free blocks), and the host blocks its copies read are freed (a fetched prefix's
        host copy included). The calls whose blocks the step was to write are the caller's
        to free (`free`): what they hold past their computed tokens is never indexed."""
        for offload in self._offloaded:
            self.host_pool.free([offload.host_block])
        for block in self._fetched:
            self.pool.unregister(block)
        self._release_step()

    def _release_step(self) -> None:
        """Forget the step's offloads and fetches; free the host blocks its copies read."""
        self._offloaded, self._num_offloads_taken, self._fetched = [], 0, []
        if self._host_in_flight:
            self.host_pool.free(self._host_in_flight)
            self._host_in_flight = []

    def _offload(self, block: int, block_hash: int, token_ids: tuple[int, ...], rank: float,
                 owner: Hashable) -> None:
        """Eviction hook: copy an evicted cached block worth keeping to a host block."""
        if self.offload_min_rank is None or rank < self.offload_min_rank:
            return
        host = self.host_pool.allocate(1)
        if host is None:
            return
        self._offloaded.append(_Offload(block, host[0], block_hash, token_ids, rank, owner))
        self.num_offloaded_blocks += 1

    def check_integrity(self) -> None:
        """Raise KVCacheIntegrityError unless the pools match the tables: each device block's
        ref count equals the number of tables holding it; the held host blocks are exactly
        those of swapped calls and of this step's copies; no call holds both kinds; every
        cached block is cached on one tier (checked by each pool's index)."""
        device_refs: Counter[int] = Counter()
        host_used: list[int] = list(self._host_in_flight)
        host_used.extend(offload.host_block for offload in self._offloaded)
        for call_id, state in self._calls.items():
            if (state.swapped and state.device) or (not state.swapped and state.host):
                raise KVCacheIntegrityError(
                    f"block table of {call_id!r}: holds both device and host blocks "
                    f"(swapped={state.swapped})"
                )
            held = state.held
            if any(b != self.pool.null_block for b in state.device[:state.num_dropped]) or \
                    self.pool.null_block in held:
                raise KVCacheIntegrityError(
                    f"block table of {call_id!r}: the null block must stand for exactly its "
                    f"{state.num_dropped} dropped leading blocks")
            if len(set(held)) != len(held):
                dup = min(b for b, n in Counter(held).items() if n > 1)
                raise KVCacheIntegrityError(f"block {dup}: twice in the table of {call_id!r}")
            device_refs.update(held)
            host_used.extend(state.host)
        self.pool.check_integrity(device_refs)
        self.host_pool.check_integrity(host_used)

    def _states(self, call_ids: Sequence[Hashable], swapped: bool) -> list[_CallBlocks]:
        if len(set(call_ids)) != len(call_ids):
            raise ValueError(f"call_ids has duplicates: {list(call_ids)!r}")
        states = []
        for call_id in call_ids:
            state = self._calls.get(call_id)
            if state is None or state.swapped != swapped:
                where = "on host" if swapped else "on device"
                raise ValueError(f"call_ids: {call_id!r} is not a known call {where}")
            states.append(state)
        return states

    def _cached_run(self, pool: BlockPool | HostBlockPool, state: _CallBlocks,
                    token_ids: Sequence[int], first: int, end: int) -> list[int]:
        """The blocks `pool` has cached for the call's full blocks `first`, `first + 1`, ...
        before `end`, up to the first miss (their chain hashes computed, or kept, to `end`)."""
        hashes = self._chain_hashes(state, token_ids, end)
        return pool.lookup_run(hashes, token_ids, first, end, self.block_size)

    def _max_hit_blocks(self, token_ids: Sequence[int]) -> int:
        return max(0, (len(token_ids) - 1) // self.block_size)

    def _chain_hashes(
        self, state: _CallBlocks, token_ids: Sequence[int], num_blocks: int
    ) -> list[int]:
        """The call's cached chain hashes, extended to cover `num_blocks` full blocks."""
        hashes, size = state.hashes, self.block_size
        while len(hashes) < num_blocks:
            i = len(hashes)
            self._append_hash(hashes, tuple(token_ids[i * size:(i + 1) * size]))
        return hashes

    def _append_hash(self, hashes: list[int], tokens: tuple[int, ...]) -> None:
        """Append to the chain `hashes` the hash of its next full block, holding `tokens`:
        `hash_block(hashes[-1], tokens)` (parent None for the first), from the memo if there."""
        key = (hashes[-1] if hashes else None, tokens)
        block_hash = self._hash_memo.get(key)
        if block_hash is None:
            block_hash = hash_block(*key)
            self._hash_memo.put(key, block_hash)
        hashes.append(block_hash)
