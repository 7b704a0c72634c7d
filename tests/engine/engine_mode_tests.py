"""test_parity's tests (batching, late arrivals, chunked prefill, prefix caching, preemption
by recompute, swap and keep, multistep), which every model family runs: a family's module
star-imports them, so pytest collects them there, on that module's `tiny_llama` fixture
(the `tiny_llama_greedy` here answers for whichever model it gives)."""

import pytest

from agentix_testing.tiny_llama import GreedyReference
from test_parity import (
    test_batch_of_eight,
    test_calls_arriving_while_others_decode,
    test_chunked_prefill_small_budget,
    test_multistep_four,
    test_preemption_under_a_tiny_pool,
    test_prefix_caching_shared_prefixes,
)



@pytest.fixture(scope="module")
def tiny_llama_greedy(tiny_llama):
    """transformers' greedy answers of the module's `tiny_llama` model."""
    return GreedyReference(tiny_llama[1])


__all__ = [
    "tiny_llama_greedy",
    "test_batch_of_eight",
    "test_calls_arriving_while_others_decode",
    "test_chunked_prefill_small_budget",
    "test_multistep_four",
    "test_preemption_under_a_tiny_pool",
    "test_prefix_caching_shared_prefixes",
]
