"""Checks and inputs shared by the engine tests that compare tokens with transformers."""

from __future__ import annotations

import random

from engine import LLMEngine


def random_tokens(rng: random.Random, n: int) -> list[int]:
    """`n` token ids of the tiny Llama's vocabulary, clear of its special ids (0-2)."""
    return [rng.randrange(3, 384) for _ in range(n)]


def assert_all_free(engine: LLMEngine) -> None:
    """Integrity holds and every block of both tiers is free (cached host blocks included)."""
    engine.check_integrity()
    assert engine.kv.num_free_blocks == engine.kv.pool.num_usable
    assert engine.kv.num_free_host_blocks == engine.kv.host_pool.num_blocks
