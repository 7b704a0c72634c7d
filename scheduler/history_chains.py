"""The chain hashes of each program's last finished call, so that its next call, which
re-sends that history, starts from them instead of hashing its history again.

A next call takes the hashes of the leading full blocks whose token ids equal the history's
(`kvcache.prefix_hash.shared_chain_hashes`: compared, never assumed), so a call that leaves
the history (a sibling in a tree search) takes only the blocks before it. Bounded: the token
ids held over all programs never exceed `max_tokens`; the least recently stored go first.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Container, Sequence

from kvcache.prefix_hash import shared_chain_hashes


class HistoryChains:
    """program id -> (token ids, chain hashes of their first full blocks), bounded."""

    def __init__(self, max_tokens: int, block_size: int) -> None:
        if max_tokens < 0 or block_size <= 0:
            raise ValueError(f"need max_tokens >= 0 and block_size > 0, got {max_tokens} "
                             f"and {block_size}")
        self.max_tokens, self.block_size = max_tokens, block_size
        self._chains: OrderedDict[str, tuple[Sequence[int], list[int]]] = OrderedDict()
        self.num_tokens = 0  # token ids held, over all programs

    def __len__(self) -> int:
        return len(self._chains)

    def remember(self, program_id: str, token_ids: Sequence[int], hashes: list[int]) -> None:
        """Keep `token_ids` (a finished call's, not changed after) and `hashes` as the
        program's history, in place of the one before; nothing for an empty `hashes` or a
        history longer than the bound."""
        self.forget(program_id)
        if not hashes or len(token_ids) > self.max_tokens:
            return
        self._chains[program_id] = (token_ids, hashes)
        self.num_tokens += len(token_ids)
        while self.num_tokens > self.max_tokens:
            _, (dropped, _) = self._chains.popitem(last=False)
            self.num_tokens -= len(dropped)

    def hashes_for(self, program_id: str, token_ids: Sequence[int]) -> list[int]:
        """A new list of the chain hashes `token_ids` shares with the program's history
        ([] without one)."""
        chain = self._chains.get(program_id)
        if chain is None:
            return []
        return shared_chain_hashes(*chain, token_ids, self.block_size)

    def forget(self, program_id: str) -> None:
        chain = self._chains.pop(program_id, None)
        if chain is not None:
            self.num_tokens -= len(chain[0])

    def check_integrity(self, live_programs: Container[str]) -> None:
        """RuntimeError unless every history is a live program's and the count of tokens
        held is their sum, within the bound."""
        dead = [p for p in self._chains if p not in live_programs]
        held = sum(len(tokens) for tokens, _ in self._chains.values())
        if dead or held != self.num_tokens or held > self.max_tokens:
            raise RuntimeError(f"history chains: {len(dead)} of ended programs, {held} tokens "
                               f"held against {self.num_tokens} counted (bound "
                               f"{self.max_tokens})")
