"""Paged KV-cache bookkeeping: block pool, prefix cache, per-call tables, host (swap) pool.

Importing this package does not import torch; the tensor side lives in `kvcache.kv_tensor`
and `kvcache.swap`, imported explicitly by the engine.
"""

from kvcache.block_pool import BlockPool
from kvcache.errors import KVCacheIntegrityError
from kvcache.host_pool import HostBlockPool
from kvcache.manager import KVCacheManager
from kvcache.prefix_hash import hash_block

__all__ = ["BlockPool", "HostBlockPool", "KVCacheIntegrityError", "KVCacheManager", "hash_block"]
