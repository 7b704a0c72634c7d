"""Per-call block tables over the device and host pools: what the scheduler talks to."""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

from kvcache.block_pool import BlockPool
from kvcache.errors import KVCacheIntegrityError
from kvcache.host_pool import HostBlockPool
from kvcache.prefix_hash import hash_block


@dataclass
class _CallBlocks:
    """One call's blocks: on device (`device`) or, when `swapped`, on host (`host`)."""

    device: list[int] = field(default_factory=list)
    host: list[int] = field(default_factory=list)
    swapped: bool = False
    hashes: list[int] = field(default_factory=list)  # chain hashes of its first full blocks
    num_registered: int = 0  # leading device blocks already offered to the prefix index


class KVCacheManager:
    """Maps opaque call ids to block tables; the only writer of the pools it owns.

    Device block 0 is the reserved null block. A call owns one ref on each block of its table
    (prefix-cache hits share blocks across calls) until `free` or `swap_out`. A swapped call
    owns host blocks instead, one per former device block, and keeps its chain hashes.
    Nothing here touches tensors: `swap_out` / `swap_in` return the copies the executor must
    make in the same step, before anything else writes those blocks (swap-outs first).
    """

    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        num_host_blocks: int = 0,
        enable_prefix_caching: bool = False,
    ) -> None:
        if num_blocks < 2:
            raise ValueError(f"num_blocks must be >= 2 (block 0 is null), got {num_blocks}")
        if block_size <= 0:
            raise ValueError(f"block_size must be positive, got {block_size}")
        if num_host_blocks < 0:
            raise ValueError(f"num_host_blocks must be >= 0, got {num_host_blocks}")
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.pool = BlockPool(num_blocks, reserve_null_block=True)
        self.host_pool = HostBlockPool(num_host_blocks)
        self._calls: dict[Hashable, _CallBlocks] = {}

    @property
    def num_free_blocks(self) -> int:
        return self.pool.num_free

    @property
    def num_free_host_blocks(self) -> int:
        return self.host_pool.num_free

    def block_table(self, call_id: Hashable) -> list[int]:
        """The call's device block ids in order ([] if it has none), as a read-only view: do
        not modify it. It may grow while the call runs; swap-out and free leave it as it was
        (the manager starts a new list), so a plan built from it stays valid for its step."""
        state = self._calls.get(call_id)
        return state.device if state else []

    def is_swapped(self, call_id: Hashable) -> bool:
        state = self._calls.get(call_id)
        return state is not None and state.swapped

    def num_host_blocks_of(self, call_id: Hashable) -> int:
        state = self._calls.get(call_id)
        return len(state.host) if state else 0

    def blocks_needed(self, call_id: Hashable, num_tokens: int) -> int:
        """New device blocks needed for the table to cover `num_tokens` tokens."""
        if num_tokens < 0:
            raise ValueError(f"num_tokens must be >= 0, got {num_tokens}")
        state = self._calls.get(call_id)
        return max(0, -(-num_tokens // self.block_size) - (len(state.device) if state else 0))

    def match_prefix(self, call_id: Hashable, token_ids: Sequence[int]) -> int:
        """Adopt the longest run of cached full blocks of `token_ids` as the call's table.

        For a call without blocks. The hit leaves at least one token to compute, so it covers
        at most `len(token_ids) - 1` tokens, in whole blocks. Each hit block gains one ref
        (cached free blocks are revived). Returns the number of cached tokens; 0, changing
        nothing, when prefix caching is off.
        """
        if not self.enable_prefix_caching:
            return 0
        state = self._calls.setdefault(call_id, _CallBlocks())
        if state.device or state.swapped:
            raise ValueError(f"call_id {call_id!r} already has blocks")
        size = self.block_size
        hits: list[int] = []
        for i in range(max(0, (len(token_ids) - 1) // size)):
            block_hash = self._chain_hashes(state, token_ids, i + 1)[i]
            block = self.pool.lookup(block_hash, token_ids[i * size:(i + 1) * size])
            if block is None:
                break
            hits.append(block)
        self.pool.incref(hits)
        state.device = hits
        state.num_registered = len(hits)
        return len(hits) * size

    def allocate(self, call_id: Hashable, num_tokens: int) -> bool:
        """Grow the call's table to cover `num_tokens` tokens; False, changing nothing, if short.

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
        blocks = self.pool.allocate(need)
        if blocks is None:
            return False
        self._calls.setdefault(call_id, _CallBlocks()).device.extend(blocks)
        return True

    def cache_blocks(
        self, call_id: Hashable, token_ids: Sequence[int], num_computed_tokens: int
    ) -> None:
        """Offer each full block among the first `num_computed_tokens` of `token_ids` (the
        call's prompt plus generated tokens) to the prefix index, once per call. Idempotent;
        no-op when prefix caching is off."""
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
        size = self.block_size
        for i in range(state.num_registered, num_full):
            self.pool.register(state.device[i], hashes[i], token_ids[i * size:(i + 1) * size])
        state.num_registered = num_full

    def free(self, call_id: Hashable) -> None:
        """Release the call's device blocks (last first) or host blocks and forget the call.

        Cached blocks whose ref reaches 0 stay findable until reused. Unknown calls: no-op.
        """
        state = self._calls.pop(call_id, None)
        if state is None:
            return
        self.pool.free(state.device)
        self.host_pool.free(state.host)

    def swap_out(self, call_ids: Sequence[Hashable]) -> list[tuple[int, int]] | None:
        """Move the listed calls' blocks to host, all or none.

        Takes one host block per device block (None, changing nothing, if the host pool is
        short), drops the calls' device refs (a shared block just loses one) and returns the
        (device_block, host_block) copies to make before any device block is written again.
        """
        states = self._states(call_ids, swapped=False)
        device = [block for state in states for block in state.device]
        host = self.host_pool.allocate(len(device))
        if host is None:
            return None
        start = 0
        for state in states:
            end = start + len(state.device)
            self.pool.free(state.device)
            state.host, state.device = host[start:end], []
            state.swapped, state.num_registered = True, 0
            start = end
        return list(zip(device, host))

    def swap_in(self, call_ids: Sequence[Hashable]) -> list[tuple[int, int]] | None:
        """Bring the listed swapped calls back onto fresh device blocks, all or none.

        None, changing nothing, if device blocks are short. Frees their host blocks and returns
        the (host_block, device_block) copies to make before those device blocks are read.
        """
        states = self._states(call_ids, swapped=True)
        host = [block for state in states for block in state.host]
        device = self.pool.allocate(len(host))
        if device is None:
            return None
        start = 0
        for state in states:
            end = start + len(state.host)
            self.host_pool.free(state.host)
            state.device, state.host = device[start:end], []
            state.swapped = False
            start = end
        return list(zip(host, device))

    def check_integrity(self) -> None:
        """Raise KVCacheIntegrityError unless the pools match the tables: each device block's
        ref count equals the number of tables holding it, the held host blocks are exactly
        those of swapped calls, and no call holds both kinds."""
        device_refs: Counter[int] = Counter()
        host_used: list[int] = []
        for call_id, state in self._calls.items():
            if (state.swapped and state.device) or (not state.swapped and state.host):
                raise KVCacheIntegrityError(
                    f"block table of {call_id!r}: holds both device and host blocks "
                    f"(swapped={state.swapped})"
                )
            if len(set(state.device)) != len(state.device):
                dup = min(b for b, n in Counter(state.device).items() if n > 1)
                raise KVCacheIntegrityError(f"block {dup}: twice in the table of {call_id!r}")
            device_refs.update(state.device)
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

    def _chain_hashes(
        self, state: _CallBlocks, token_ids: Sequence[int], num_blocks: int
    ) -> list[int]:
        """The call's cached chain hashes, extended to cover `num_blocks` full blocks."""
        hashes, size = state.hashes, self.block_size
        while len(hashes) < num_blocks:
            i = len(hashes)
            parent = hashes[-1] if hashes else None
            hashes.append(hash_block(parent, token_ids[i * size:(i + 1) * size]))
        return hashes
