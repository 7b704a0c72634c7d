"""CallStream: the asyncio end of one streamed call (deltas, then one final item, or an
error the reader raises: `fail`).

Bounded: a client that stops reading leaves its items queued; once `max_unread` of them
wait, the call is aborted (its blocks freed at once), the queued items are dropped, the cut
is logged, and a later read raises UnreadStreamError (RESOURCE_EXHAUSTED). One item is one
engine step's tokens, so the default bound is 1,024 steps without a read.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Callable

from engine import CompletionOutput
from engine.logprobs import TokenLogprob
from server.errors import UnreadStreamError

log = logging.getLogger(__name__)
MAX_UNREAD_ITEMS = 1024


@dataclass(frozen=True)
class StreamDelta:
    """New tokens of a call and the text they settled (may be empty), with the tokens'
    logprobs when the call asked for them; a call's first delta carries its prompt logprobs
    when it asked for them (`SamplingParams.prompt_logprobs`: None for the first token)."""

    token_ids: list[int]
    text: str
    logprobs: list[TokenLogprob] | None = None
    prompt_logprobs: list[TokenLogprob | None] | None = None


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
                 on_cancel: Callable[[CallStream], None],
                 max_unread: int = MAX_UNREAD_ITEMS) -> None:
        self._loop = loop
        self._on_cancel = on_cancel
        self._max_unread = max_unread
        self._items: asyncio.Queue[StreamItem | Exception] = asyncio.Queue()
        self._cut = False  # the client stopped reading: the call was aborted
        self.call_id: str | None = None  # set on the engine thread once the call is added
        self.done = False

    def put(self, item: StreamItem) -> None:
        """Hand an item to the asyncio side (any thread; dropped once that loop is closed)."""
        self._hand(item)

    def fail(self, error: Exception) -> None:
        """End the stream with `error` instead of a final item: the reader raises it (any
        thread; the call is over, so nothing is aborted)."""
        self._hand(error)

    def _hand(self, item: StreamItem | Exception) -> None:
        try:
            self._loop.call_soon_threadsafe(self._deliver, item)
        except RuntimeError:
            pass

    def _deliver(self, item: StreamItem | Exception) -> None:
        """(On the loop.) Queue `item`, or cut the stream when `max_unread` items wait."""
        if self._cut:
            return
        if self._items.qsize() >= self._max_unread and not self.done:
            self._cut = True
            log.warning("call %s: the client read none of its last %d stream items; the call "
                        "is aborted and its stream cut", self.call_id, self._max_unread)
            while not self._items.empty():
                self._items.get_nowait()
            self._on_cancel(self)
            self._items.put_nowait(UnreadStreamError(  # wakes a reader, which raises it
                f"call {self.call_id}: the client read none of its last {self._max_unread} "
                f"stream items, so the call was aborted; read a stream as it comes"))
            return
        self._items.put_nowait(item)

    def __aiter__(self) -> CallStream:
        return self

    async def __anext__(self) -> StreamItem:
        if self.done:
            raise StopAsyncIteration
        item = await self._items.get()
        if isinstance(item, Exception):
            self.done = True
            raise item
        self.done = isinstance(item, StreamFinal)
        return item

    def cancel(self) -> None:
        """Abort the call unless its final item was already read (idempotent)."""
        if self.done:
            return
        self.done = True
        self._on_cancel(self)
