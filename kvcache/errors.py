"""The one exception the KV cache raises when its own bookkeeping is inconsistent."""

from __future__ import annotations


class KVCacheIntegrityError(RuntimeError):
    """A block or host-block invariant is broken (double free, ref-count drift, stale index).

    Bad arguments raise `ValueError` instead; this error means the cache state itself is wrong,
    and its message names the offending block.
    """
