"""EngineLoop: the one thread that owns an LLMEngine, and the asyncio-facing way to use it.

The engine is not thread-safe, so everything that touches it (validation, adding and
aborting calls, reading program records, steps) runs as a command on the loop thread.
Handlers on an asyncio event loop `await run(fn)` for a one-shot `fn(engine)`, or
`await submit(add)` for a call whose tokens then stream back through a `CallStream`.
Commands run in the order they were posted (so an abort posted after an add sees the call).
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import logging
import threading
import time
from dataclasses import dataclass, replace
from typing import Callable, TypeVar

from engine import CompletionOutput, LLMEngine, StepOutput
from engine.call import FinishReason
from engine.errors import EngineBrokenError, StepFailedError
from engine.logprobs import TokenLogprob
from server.call_stream import CallStream, StreamDelta, StreamFinal
from server.detok import IncrementalText
from server.errors import DrainingError, QueueFullError
from server.wire import SHUTDOWN

T = TypeVar("T")
log = logging.getLogger(__name__)
COMMAND_BUDGET_SECONDS = 0.02  # commands run between two steps while calls are in flight


@dataclass
class _Tracked:
    """Engine-thread state of one streamed call (`shutdown`: cut by the drain; `started`: a
    delta went out)."""

    stream: CallStream
    text: IncrementalText
    shutdown: bool = False
    started: bool = False


class EngineLoop:
    """Owns `engine` on a daemon thread from `start()` to `stop()`.

    Idle, the thread sleeps on a wake-up event and steps once per `idle_tick` seconds so that
    program TTL expiry still runs. While calls are in flight it steps back to back, running
    posted commands between steps. New calls are refused with QueueFullError while
    `max_waiting` calls are waiting (queued or swapped out), with DrainingError once
    draining has begun, and with EngineBrokenError once a step found the engine broken (a
    tensor-parallel worker died): then every stream in flight ends in that error, the loop
    steps no more, and only commands run until `stop()`. The loop pops every finished call's
    completion: a streamed call's goes to its stream, that of a call added some other way
    (`run(lambda e: e.add_call(..))`) is dropped, so the engine never keeps finished calls.
    """

    def __init__(self, engine: LLMEngine, max_waiting: int = 1024, idle_tick: float = 1.0,
                 on_completion: Callable[[CompletionOutput], None] | None = None,
                 stall_seconds: float = 30.0) -> None:
        if max_waiting <= 0:
            raise ValueError(f"max_waiting must be positive, got {max_waiting}")
        if idle_tick <= 0:
            raise ValueError(f"idle_tick must be positive, got {idle_tick}")
        if stall_seconds <= 0:
            raise ValueError(f"stall_seconds must be positive, got {stall_seconds}")
        self.stall_seconds = stall_seconds
        self.engine = engine
        self.max_waiting = max_waiting
        self.idle_tick = idle_tick
        self._on_completion = on_completion
        self._commands: collections.deque[Callable[[], None]] = collections.deque()
        self._lock = threading.Lock()  # guards _commands and _closed
        self._wake = threading.Event()
        self._closed = False           # no more commands are accepted
        self._stopping = False         # engine thread: leave the loop
        self._draining = False
        self._broken: str | None = None  # why the engine broke; set once, by its thread
        self._streams: dict[str, _Tracked] = {}  # engine thread only
        self._progress_at = time.monotonic()  # heartbeat: the last step or command batch done
        self._thread = threading.Thread(target=self._main, name="agentix-engine", daemon=True)

    # ----- any thread -------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    @property
    def draining(self) -> bool:
        return self._draining

    def _stalled(self) -> bool:
        """Whether the engine thread has work (calls in flight or commands waiting) and has
        finished no step or command for `stall_seconds` (any thread)."""
        busy = bool(self._streams) or bool(self._commands)
        return busy and time.monotonic() - self._progress_at > self.stall_seconds

    def unavailable(self) -> str | None:
        """Why the engine takes no calls now (None: it does): it broke (for good), or it is
        stalled (until it makes progress). Any thread; health reads it."""
        if self._broken is not None:
            return self._broken
        if self._stalled():
            return (f"the engine has made no progress for {self.stall_seconds:g} s while it "
                    f"has work")
        return None

    def refuse_new_work(self) -> None:
        """DrainingError once draining has begun, EngineBrokenError once the engine broke
        (engine thread: run before starting a program or adding a call)."""
        if self._draining:
            raise DrainingError("the server is shutting down: no new calls or programs")
        if self._broken is not None:
            raise EngineBrokenError(self._broken)

    def post(self, command: Callable[[], None]) -> None:
        """Queue `command` for the engine thread; DrainingError once the loop is stopped."""
        with self._lock:
            if self._closed:
                raise DrainingError("the server is shutting down")
            self._commands.append(command)
        self._wake.set()

    def _future(self, fn: Callable[[LLMEngine], T]) -> concurrent.futures.Future[T]:
        future: concurrent.futures.Future[T] = concurrent.futures.Future()

        def command() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                future.set_result(fn(self.engine))
            except BaseException as exc:  # handed to the waiter, never kills the loop
                future.set_exception(exc)

        self.post(command)
        return future

    def call(self, fn: Callable[[LLMEngine], T], timeout: float | None = 60.0) -> T:
        """Run `fn(engine)` on the engine thread and return its result (blocking; for tests
        and synchronous callers, not for the engine thread itself)."""
        if threading.current_thread() is self._thread:
            return fn(self.engine)
        return self._future(fn).result(timeout)

    async def run(self, fn: Callable[[LLMEngine], T]) -> T:
        """Run `fn(engine)` on the engine thread; its result or exception comes back here."""
        return await asyncio.wrap_future(self._future(fn))

    async def submit(self, add: Callable[[LLMEngine], str]) -> CallStream:
        """Add a call with `add(engine) -> call_id` (which validates and raises request
        errors) and return its stream. If the awaiting task is cancelled, the call is
        aborted as soon as it exists."""
        stream = CallStream(asyncio.get_running_loop(), self._cancel)
        future: concurrent.futures.Future[str] = concurrent.futures.Future()
        self.post(lambda: self._add(stream, add, future))
        try:
            await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            stream.cancel()
            raise
        return stream

    async def drain(self, grace: float, abort_wait: float = 5.0) -> None:
        """Refuse new calls, give in-flight calls `grace` seconds to finish, abort the rest
        and wait (up to `abort_wait`) until their final items are out."""
        await self.run(lambda engine: self._begin_draining())
        deadline = time.monotonic() + max(0.0, grace)
        while await self.run(lambda engine: bool(self._streams)) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        await self.run(lambda engine: self._abort_all())
        deadline = time.monotonic() + abort_wait
        while await self.run(lambda engine: bool(self._streams)) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)

    def stop(self, timeout: float | None = 30.0) -> None:
        """Stop the engine thread (after `drain`, or abruptly: streams then get no final),
        then close the engine (its tensor-parallel workers). Commands posted afterwards raise
        DrainingError. Idempotent."""
        with self._lock:
            if not self._closed:
                self._commands.append(self._request_stop)
            self._closed = True
        self._wake.set()
        if threading.current_thread() is self._thread:
            return
        if self._thread.is_alive():
            self._thread.join(timeout)
        self.engine.close()

    # ----- engine thread ----------------------------------------------------------------
    def _main(self) -> None:
        last_step = time.monotonic()
        while not self._stopping:
            self._wake.clear()
            busy = bool(self._streams) or self.engine.has_unfinished_calls()
            self._run_commands(COMMAND_BUDGET_SECONDS if busy else None)
            self._progress_at = time.monotonic()
            if self._stopping:
                break
            if self._broken is not None:  # no step can run: only commands, when posted
                if not self._commands:
                    self._wake.wait()
                continue
            idle_for = time.monotonic() - last_step
            # Step while calls are in flight; idle, once per tick (TTL expiry), however
            # many commands wake the thread in between.
            if self._streams or self.engine.has_unfinished_calls() or idle_for >= self.idle_tick:
                self._step()
                last_step = self._progress_at = time.monotonic()
            elif not self._commands:
                self._wake.wait(self.idle_tick - idle_for)

    def _request_stop(self) -> None:
        self._stopping = True

    def _run_commands(self, budget: float | None) -> None:
        """Run posted commands in order: all of them, or while calls are in flight only
        until `budget` seconds have passed, so a burst of requests cannot hold up a step
        (the rest run after it)."""
        deadline = None if budget is None else time.monotonic() + budget
        while deadline is None or time.monotonic() < deadline:
            with self._lock:
                if not self._commands:
                    return
                command = self._commands.popleft()
            try:
                command()
            except Exception:
                log.exception("engine loop command failed")

    def _begin_draining(self) -> None:
        self._draining = True

    def _add(self, stream: CallStream, add: Callable[[LLMEngine], str],
             future: concurrent.futures.Future[str]) -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            self.refuse_new_work()
            # Calls that free seats will take at the next step are not waiting.
            if self.engine.num_waiting - self.engine.num_free_seats >= self.max_waiting:
                raise QueueFullError(f"max_waiting: the waiting queue is full "
                                     f"({self.max_waiting} calls)")
            call_id = add(self.engine)
        except BaseException as exc:
            future.set_exception(exc)
            return
        stream.call_id = call_id
        call = self.engine.calls[call_id]
        decode = self.engine.tokenizer.decode if self.engine.tokenizer is not None else None
        self._streams[call_id] = _Tracked(stream, IncrementalText(decode, call.params.stop))
        future.set_result(call_id)

    def _cancel(self, stream: CallStream) -> None:
        try:
            self.post(lambda: self._abort_stream(stream))
        except DrainingError:
            pass  # the engine thread is gone, and the call with it

    def _abort_stream(self, stream: CallStream) -> None:
        if stream.call_id is not None and stream.call_id in self._streams:
            self.engine.abort_call(stream.call_id)

    def _abort_all(self) -> None:
        """Cut every call in flight for shutdown: they end with finish reason "shutdown"."""
        for call_id, tracked in list(self._streams.items()):
            tracked.shutdown = True
            self.engine.abort_call(call_id)

    def _step(self) -> None:
        """One engine step and its outputs handed out. A step that failed (StepFailedError)
        has already ended exactly the calls it named: their streams end with "error" and the
        others go on, unless the engine broke (`_break`). If anything else raises, every
        call in flight is aborted and its stream ends with "error". Either way the loop goes
        on."""
        try:
            self._dispatch(self.engine.step())
        except StepFailedError as exc:
            log.error("%s; failing their streams", exc, exc_info=exc.cause)
            if isinstance(exc.cause, EngineBrokenError):
                self._break(exc.cause)
                return
            for call_id in exc.call_ids:
                if call_id in self._streams:
                    self._fail(call_id)
        except Exception:
            log.exception("engine step failed; failing the calls in flight")
            self._fail_all()

    def _dispatch(self, outputs: list[StepOutput]) -> None:
        for out in outputs:
            tracked = self._streams.get(out.call_id)
            if tracked is None:
                if out.finished and out.call_id in self.engine.calls:
                    self._pop(out.call_id)  # no stream: do not keep it
                continue
            if not out.finished:
                text = tracked.text.push(out.new_token_ids)
                tracked.stream.put(self._delta(tracked, out, text))
                continue
            prompt_logprobs = self._first_prompt_logprobs(tracked, out.call_id)
            del self._streams[out.call_id]
            completion = self._pop(out.call_id)
            if tracked.shutdown and completion.finish_reason == FinishReason.ABORT:
                completion = replace(completion, finish_reason=SHUTDOWN)
            rest = tracked.text.finish(completion.text)
            if out.new_token_ids or rest:
                tracked.stream.put(StreamDelta(list(out.new_token_ids), rest, out.logprobs,
                                               prompt_logprobs))
            tracked.stream.put(StreamFinal(completion))
        if self._streams and not self.engine.has_unfinished_calls():
            self._reap_orphans()

    def _delta(self, tracked: _Tracked, out: StepOutput, text: str) -> StreamDelta:
        return StreamDelta(list(out.new_token_ids), text, out.logprobs,
                           self._first_prompt_logprobs(tracked, out.call_id))

    def _first_prompt_logprobs(self, tracked: _Tracked, call_id: str
                               ) -> list[TokenLogprob | None] | None:
        """The call's prompt logprobs for its first delta (None later, or not asked)."""
        if tracked.started:
            return None
        tracked.started = True
        call = self.engine.calls[call_id]
        if call.params.prompt_logprobs is None:
            return None
        return list(call.prompt_logprobs)

    def _pop(self, call_id: str) -> CompletionOutput:
        completion = self.engine.pop_completion(call_id)
        if self._on_completion is not None:
            self._on_completion(completion)
        return completion

    def _reap_orphans(self) -> None:
        """Streams whose call the engine no longer runs, after a step that gave them no
        final output (should not happen; this keeps such a bug from spinning the loop)."""
        for call_id in list(self._streams):
            call = self.engine.calls.get(call_id)
            if call is None or call.is_finished:
                self._fail(call_id)

    def _break(self, error: EngineBrokenError) -> None:
        """The engine can step no more, for good: every call in flight ends and its stream
        raises an EngineBrokenError like `error` (UNAVAILABLE: retry elsewhere)."""
        self._broken = str(error)
        self._fail_all(broken=True)

    def _fail_all(self, broken: bool = False) -> None:
        """End every call in flight (`_fail`)."""
        for call_id in list(self._streams):
            try:
                self.engine.abort_call(call_id)
            except Exception:
                log.exception("could not abort %s", call_id)
            self._fail(call_id, broken)

    def _fail(self, call_id: str, broken: bool = False) -> None:
        """End a stream with "error" (with the call's usage when the engine still has it),
        or, once the engine `broken`, with EngineBrokenError raised to its reader."""
        tracked = self._streams.pop(call_id)
        now = self.engine.clock()
        completion = CompletionOutput(
            call_id=call_id, prompt_token_ids=[], token_ids=[], text="", finish_reason="error",
            num_cached_tokens=0, num_preemptions=0, queue_seconds=0.0, service_seconds=0.0,
            arrival_time=now, first_token_time=None, finish_time=now)
        try:
            call = self.engine.calls.get(call_id)
            if call is not None and call.is_finished:
                completion = self._pop(call_id)
        except Exception:
            log.exception("could not pop %s", call_id)
        if broken:
            tracked.stream.fail(EngineBrokenError(self._broken))
            return
        tracked.stream.put(StreamFinal(replace(completion, text=tracked.text.sent,
                                               finish_reason="error")))
