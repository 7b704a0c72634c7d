"""The items of a request's several calls as one stream (the door's `n > 1` and batched
prompts, streamed)."""

from __future__ import annotations

import asyncio
from typing import AsyncIterator

from server.call_stream import StreamItem
from server.door_backend import CallItems


async def merged(streams: list[CallItems]) -> AsyncIterator[tuple[int, StreamItem]]:
    """The streams' items as they arrive, each with its stream's index.

    One read of each stream is outstanding at a time, and a stream's next read starts only
    when the consumer asks for the next item: at most one item of each stream is held here,
    so each stream's own bound on unread items (`server.call_stream`) still applies. The
    first error a stream raises is raised to the consumer. However the merge ends (all
    streams done, an error, the consumer closing it), every stream is cancelled
    (`CallItems.cancel`: nothing for one that finished)."""
    readers = [aiter(stream) for stream in streams]
    reads: dict[asyncio.Future, int] = {}  # each stream's outstanding read

    def read(index: int) -> None:
        reads[asyncio.ensure_future(anext(readers[index]))] = index

    for index in range(len(streams)):
        read(index)
    try:
        while reads:
            done, _ = await asyncio.wait(reads, return_when=asyncio.FIRST_COMPLETED)
            for future in sorted(done, key=reads.__getitem__):
                index = reads.pop(future)
                try:
                    item = future.result()
                except StopAsyncIteration:
                    continue
                yield index, item
                read(index)
    finally:
        for future in reads:
            if not future.cancel() and not future.cancelled():
                future.exception()  # a later stream's error, dropped: the first one counts
        for stream in streams:
            stream.cancel()
