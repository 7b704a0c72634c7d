"""The items of a request's several calls as one stream (the door's `n > 1` and batched
prompts, streamed)."""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator

from server.door_backend import CallItems


async def merged(streams: list[CallItems]) -> AsyncIterator[tuple[int, Any]]:
    """Items of several streams as they arrive, tagged with the stream's index."""
    if len(streams) == 1:
        async for item in streams[0]:
            yield 0, item
        return
    queue: asyncio.Queue = asyncio.Queue()

    async def pump(index: int, stream: CallItems) -> None:
        async for item in stream:
            await queue.put((index, item))
        await queue.put((index, None))

    tasks = [asyncio.ensure_future(pump(i, s)) for i, s in enumerate(streams)]
    try:
        open_streams = len(streams)
        while open_streams:
            index, item = await queue.get()
            if item is None:
                open_streams -= 1
            else:
                yield index, item
    finally:
        for task in tasks:
            task.cancel()
