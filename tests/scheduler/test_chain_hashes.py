"""A program's next call starts from the chain hashes of its last finished call
(`HistoryChains`): the blocks its history shares are compared, not hashed again, the hashes
equal those from scratch, and what is kept is bounded and forgotten with the program."""

from __future__ import annotations

import chain_hashes
import pytest
from harness import Sim

from scheduler.history_chains import HistoryChains

BLOCK = 4


def scratch_hashes(tokens: list[int]) -> list[int]:
    return chain_hashes.scratch_hashes(tokens, BLOCK)


@pytest.fixture
def sim() -> Sim:
    sim = Sim("fcfs", num_blocks=64, block_size=BLOCK, prefix_caching=True)
    sim.start("A")
    return sim


def hashed_blocks(sim: Sim, monkeypatch) -> list[tuple[int, ...]]:
    """The token ids of every block the KV manager chains from here on (memo hits too)."""
    blocks: list[tuple[int, ...]] = []
    chain = sim.kv._append_hash

    def counting(hashes: list[int], tokens: tuple[int, ...]) -> None:
        blocks.append(tokens)
        chain(hashes, tokens)

    monkeypatch.setattr(sim.kv, "_append_hash", counting)
    return blocks


def test_the_next_call_hashes_only_the_blocks_its_history_does_not_cover(sim, monkeypatch):
    first = sim.call("A", "a1", 10, 4, token_ids=list(range(100, 110)))
    sim.run()
    history = list(first.all_token_ids)  # 10 prompt + 4 generated: 3 full blocks computed
    assert sim.scheduler.histories.hashes_for("A", history) == scratch_hashes(history)
    blocks = hashed_blocks(sim, monkeypatch)
    tokens = history + [1, 2, 3, 4, 5, 6]  # the tool's result: 20 tokens, 5 full blocks
    second = sim.call("A", "a2", len(tokens), 4, token_ids=tokens)
    assert sim.scheduler.records["a2"].block_hashes == scratch_hashes(history)
    sim.run_clean()
    everything = second.all_token_ids  # 24 tokens; the last one is never computed
    assert blocks == [tuple(everything[i:i + BLOCK]) for i in (12, 16)]
    assert sim.scheduler.histories.hashes_for("A", everything) == scratch_hashes(everything)[:5]


def test_a_call_that_leaves_the_history_shares_only_the_blocks_before(sim):
    sim.call("A", "a1", 12, 4, token_ids=list(range(100, 112)))
    sim.run()
    sibling = list(range(100, 106)) + [0] * 10  # differs inside block 1
    sim.call("A", "a2", len(sibling), 2, token_ids=sibling)
    assert sim.scheduler.records["a2"].block_hashes == scratch_hashes(sibling)[:1]
    sim.run_clean()


def test_an_ended_program_leaves_no_history(sim):
    sim.call("A", "a1", 8, 4, token_ids=list(range(100, 108)))
    sim.run()
    assert len(sim.scheduler.histories) == 1
    assert sim.scheduler.end_program("A", sim.now)[1] == []
    assert len(sim.scheduler.histories) == 0 and sim.scheduler.histories.num_tokens == 0
    sim.scheduler.check_integrity()


def test_the_tokens_held_are_bounded_and_the_oldest_history_goes_first():
    chains = HistoryChains(max_tokens=24, block_size=BLOCK)
    a, b, c = list(range(8)), list(range(100, 112)), list(range(200, 210))
    chains.remember("a", a, scratch_hashes(a))
    chains.remember("b", b, scratch_hashes(b))
    assert (len(chains), chains.num_tokens) == (2, 20)
    chains.remember("c", c, scratch_hashes(c))  # 30 tokens: "a", the oldest, goes
    assert chains.hashes_for("a", a) == [] and chains.hashes_for("b", b) == scratch_hashes(b)
    assert (len(chains), chains.num_tokens) == (2, 22)
    longer = c + [1, 2]
    chains.remember("c", longer, scratch_hashes(longer))  # replaces its own: 12 + 12
    assert (len(chains), chains.num_tokens) == (2, 24)
    assert chains.hashes_for("c", longer + [3]) == scratch_hashes(longer)
    too_long = list(range(25))
    chains.remember("long", too_long, scratch_hashes(too_long))  # over the bound: not kept
    assert chains.hashes_for("long", too_long) == [] and chains.num_tokens == 24
    chains.remember("d", [1, 2, 3], [])  # no full block: nothing to keep
    assert len(chains) == 2
    chains.forget("b")
    assert (len(chains), chains.num_tokens) == (1, 12)
    with pytest.raises(ValueError, match="max_tokens"):
        HistoryChains(-1, BLOCK)
