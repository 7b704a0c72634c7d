"""Chained block hashes: deterministic, sensitive to parent, content and order."""

import pytest

from kvcache.prefix_hash import hash_block


def test_hash_is_a_deterministic_int():
    assert hash_block(None, [1, 2, 3, 4]) == hash_block(None, (1, 2, 3, 4))
    assert isinstance(hash_block(None, [1, 2, 3, 4]), int)


def test_hash_depends_on_parent_content_and_order():
    root = hash_block(None, [1, 2, 3, 4])
    hashes = {
        root,
        hash_block(None, [4, 3, 2, 1]),
        hash_block(None, [1, 2, 3, 5]),
        hash_block(root, [1, 2, 3, 4]),
        hash_block(hash_block(None, [9, 9, 9, 9]), [1, 2, 3, 4]),
        hash_block(0, [1, 2, 3, 4]),
    }
    assert len(hashes) == 6


def test_foreign_parent_hash_is_rejected():
    with pytest.raises(ValueError, match="parent_hash"):
        hash_block(-1, [1, 2])
