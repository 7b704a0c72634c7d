"""A stream whose client stops reading is bounded (server.call_stream): once `max_unread`
items wait unread the call is aborted once, the queued items are dropped, later items are
dropped too, and a read raises UnreadStreamError (RESOURCE_EXHAUSTED); a client that keeps
reading is never cut."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from server.call_stream import CallStream, StreamDelta
from server.errors import UnreadStreamError, status_of


def delta(i: int) -> StreamDelta:
    return StreamDelta([i], f"w{i}")


async def settle() -> None:
    for _ in range(3):  # let call_soon_threadsafe callbacks run
        await asyncio.sleep(0)


def test_a_stream_nobody_reads_is_cut_once_at_the_bound():
    async def scenario():
        cancelled = []
        stream = CallStream(asyncio.get_running_loop(), cancelled.append, max_unread=3)
        stream.call_id = "c1"
        for i in range(3):
            stream.put(delta(i))
        await settle()
        assert cancelled == []
        for i in range(3, 10):  # the fourth unread item cuts it; the rest are dropped
            stream.put(delta(i))
        await settle()
        assert cancelled == [stream]
        with pytest.raises(UnreadStreamError) as info:
            await stream.__anext__()
        assert status_of(info.value) == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "c1" in str(info.value) and "3 stream items" in str(info.value)
        with pytest.raises(StopAsyncIteration):
            await stream.__anext__()

    asyncio.run(scenario())


def test_a_reader_that_keeps_up_is_never_cut():
    async def scenario():
        cancelled = []
        stream = CallStream(asyncio.get_running_loop(), cancelled.append, max_unread=3)
        got = []
        for i in range(20):
            stream.put(delta(i))
            await settle()
            got.append((await stream.__anext__()).token_ids[0])
        assert got == list(range(20)) and cancelled == []

    asyncio.run(scenario())
