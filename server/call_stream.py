"""CallStream: the asyncio end of one streamed call (deltas, then one final item)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Callable

from engine import CompletionOutput


@dataclass(frozen=True)
class StreamDelta:
    """New tokens of a call and the text they settled (may be empty)."""

    token_ids: list[int]
    text: str


@dataclass(frozen=True)
class StreamFinal:
    """The last item of a stream: the finished call (`finish_reason` "error" when the engine
    failed under it, then the other fields are best effort)."""

    completion: CompletionOutput


StreamItem = StreamDelta | StreamFinal


class CallStream:
    """Iterate it for deltas, then one final item.

    Items are put from the engine thread; iteration and `cancel()` belong to `loop`.
    `cancel()` asks the owner (`on_cancel`) to abort the call; the engine thread may still put
    items until the final one, which are then dropped.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop,
                 on_cancel: Callable[[CallStream], None]) -> None:
        self._loop = loop
        self._on_cancel = on_cancel
        self._items: asyncio.Queue[StreamItem] = asyncio.Queue()
        self.call_id: str | None = None  # set on the engine thread once the call is added
        self.done = False

    def put(self, item: StreamItem) -> None:
        """Hand an item to the asyncio side (any thread; dropped once that loop is closed)."""
        try:
            self._loop.call_soon_threadsafe(self._items.put_nowait, item)
        except RuntimeError:
            pass

    def __aiter__(self) -> CallStream:
        return self

    async def __anext__(self) -> StreamItem:
        if self.done:
            raise StopAsyncIteration
        item = await self._items.get()
        self.done = isinstance(item, StreamFinal)
        return item

    def cancel(self) -> None:
        """Abort the call unless its final item was already read (idempotent)."""
        if self.done:
            return
        self.done = True
        self._on_cancel(self)
