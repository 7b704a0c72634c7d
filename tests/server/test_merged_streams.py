"""A request's calls merged into one stream (server.merged_streams): an error one stream
raises reaches the consumer and cancels the others; merging reads at most one item of each
stream ahead of the consumer, so each stream's bound on unread items still cuts a consumer
that stops reading (test_call_stream_bound.py)."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from test_call_stream_bound import delta, settle

from server.call_stream import CallStream, StreamDelta
from server.errors import RelayedError, UnreadStreamError
from server.merged_streams import merged

WAIT_SECONDS = 2.0  # far longer than any scenario here needs; a merge that hangs fails


class FakeItems:
    """A call's items (server.door_backend.CallItems): `items`, then `error` raised, or (no
    error) a call that never ends; `cancels` counts cancel()."""

    def __init__(self, items: list[StreamDelta], error: Exception | None = None) -> None:
        self.call_id = None
        self.items, self.error = list(items), error
        self.cancels = 0

    def __aiter__(self) -> FakeItems:
        return self

    async def __anext__(self) -> StreamDelta:
        if not self.items and self.error is not None:
            raise self.error
        if not self.items:
            await asyncio.Event().wait()  # a call still running: no item, no end
        return self.items.pop(0)

    def cancel(self) -> None:
        self.cancels += 1


async def read_until_raised(items) -> tuple[list[tuple[int, StreamDelta]], BaseException]:
    """(the items read, the error that ended the merge); fails if it does not end."""
    got = []
    with pytest.raises(Exception) as info:
        async with asyncio.timeout(WAIT_SECONDS):
            async for pair in items:
                got.append(pair)
    return got, info.value


def test_an_error_of_one_stream_reaches_the_consumer_and_cancels_the_others():
    lost = RelayedError(grpc.StatusCode.UNAVAILABLE, "the replica was lost")

    async def scenario():
        running, failing = FakeItems([delta(0)]), FakeItems([delta(1)], lost)
        got, error = await read_until_raised(merged([running, failing]))
        assert dict(got) == {0: delta(0), 1: delta(1)}
        assert error is lost
        assert running.cancels == 1  # the call still running is aborted at once

    asyncio.run(scenario())


def test_a_consumer_that_stops_reading_is_cut_by_each_streams_bound():
    """Two streams of at most 3 unread items; the consumer reads one merged item and stops
    while 5 more arrive on each, one at a time: merging held one item of each stream at most,
    so both are cut, once each, at their fourth unread item, and the consumer's next reads
    give the one item read ahead, then the cut."""
    async def scenario():
        cancelled = []
        loop = asyncio.get_running_loop()
        streams = [CallStream(loop, cancelled.append, max_unread=3) for _ in range(2)]
        for stream in streams:
            stream.put(delta(0))
        await settle()
        items = merged(streams)
        first, _ = await anext(items)
        for i in range(1, 6):
            for stream in streams:
                stream.put(delta(i))
            await settle()  # time for the merge to read whatever it would read
        assert cancelled == streams
        got, error = await read_until_raised(items)
        assert got == [(1 - first, delta(0))]
        assert isinstance(error, UnreadStreamError)

    asyncio.run(scenario())
