"""What the router knows of one replica's prefix cache from its KV events (`CacheEvents`
RPC, `kvcache.cache_events`): read after each EngineStats poll, so it lags by at most a
poll. Only a router the replicas trust (a router token) may read them; a replica that
refuses (PERMISSION_DENIED) or cannot (UNIMPLEMENTED: a router behind a router) is not asked
again, and placement falls back to what the router sent there (`SentBlocks`). Any other
failure keeps the last view: the health check, not this, decides whether a replica is lost.
"""

from __future__ import annotations

import logging
from typing import Sequence

import grpc

from kvcache.cache_events import CacheDigest, CacheView
from server import agentix_pb2 as pb
from server import agentix_pb2_grpc

log = logging.getLogger(__name__)
REFUSALS = (grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNIMPLEMENTED)


class ReplicaCache:
    """One replica's cache as its KV events say (`hashes`: None until read, or when the
    replica refuses them)."""

    def __init__(self, index: int, metadata: Sequence[tuple[str, str]], timeout: float
                 ) -> None:
        self.index = index
        self.metadata = tuple(metadata)
        self.timeout = timeout
        self.view = CacheView()
        self.read = False
        self.refused = False

    @property
    def hashes(self) -> set[int] | None:
        return self.view.hashes if self.read and not self.refused else None

    async def refresh(self, stub: agentix_pb2_grpc.AgentixStub) -> None:
        """Apply the events since the last read (nothing once refused)."""
        if self.refused:
            return
        try:
            reply = await stub.CacheEvents(
                pb.CacheEventsRequest(epoch=self.view.epoch, since=self.view.next),
                metadata=self.metadata, timeout=self.timeout)
        except grpc.aio.AioRpcError as exc:
            if exc.code() in REFUSALS:
                self.refused = True
                log.info("replica %d gives no KV events (%s): placement guesses its cache",
                         self.index, exc.code().name)
            return
        self.view.apply(CacheDigest(reply.epoch, reply.next, reply.reset, tuple(reply.stored),
                                    tuple(reply.removed)))
        self.read = True
