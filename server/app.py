"""Start and stop the gRPC server: the engine on its own thread (EngineLoop), the grpc.aio
server on an asyncio event loop on another, health checking and server reflection.

    running = start_server(EngineConfig(model=DIR, policy="atlas"), port=0)
    ... running.address ...
    running.stop()          # NOT_SERVING, drain (grace), abort the rest, stop

Health reports SERVING for "" and "agentix.v1.Agentix" from when the model is loaded until
shutdown starts. Health and reflection need no token; the Agentix service does when auth is on.
"""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from typing import Callable

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from engine import EngineConfig, LLMEngine
from server import agentix_pb2_grpc
from server.auth import TokenAuth
from server.engine_loop import EngineLoop
from server.service import SERVICE_NAME, AgentixServicer

HEALTH_SERVICE_NAME = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name
HANDLER_GRACE = 1.0  # after the engine drained: time for handlers to send their last message


def format_address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"


class RunningServer:
    """A started server. `port`/`address` are where it listens; `engine_loop` runs things on
    the engine thread (`engine_loop.call(fn)` returns `fn(engine)`); `stop()` shuts down."""

    def __init__(self, engine_loop: EngineLoop, loop: asyncio.AbstractEventLoop,
                 loop_thread: threading.Thread, server: grpc.aio.Server,
                 health_servicer: health.aio.HealthServicer, host: str, port: int,
                 grace: float) -> None:
        self.engine_loop = engine_loop
        self.port = port
        self.address = format_address(host, port)
        self.grace = grace
        self._loop = loop
        self._loop_thread = loop_thread
        self._server = server
        self._health = health_servicer
        self._stop_lock = threading.Lock()
        self._stopped = False

    def stop(self, grace: float | None = None) -> None:
        """Report NOT_SERVING, refuse new programs and calls (UNAVAILABLE), give calls in
        flight `grace` seconds (default: the server's) to finish, abort the rest, then stop
        the gRPC server, the engine thread and the event loop. Idempotent; blocks until done."""
        with self._stop_lock:
            if self._stopped:
                return
            self._stopped = True
        grace = self.grace if grace is None else grace
        try:
            asyncio.run_coroutine_threadsafe(self._shutdown(grace), self._loop).result()
        finally:
            self.engine_loop.stop()
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._loop_thread.join()
            self._loop.close()

    async def _shutdown(self, grace: float) -> None:
        await self._health.enter_graceful_shutdown()
        await self.engine_loop.drain(grace)
        await self._server.stop(HANDLER_GRACE)


async def _start_grpc(engine_loop: EngineLoop, auth: TokenAuth | None, host: str, port: int
                      ) -> tuple[grpc.aio.Server, health.aio.HealthServicer, int]:
    server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
    agentix_pb2_grpc.add_AgentixServicer_to_server(AgentixServicer(engine_loop, auth), server)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        (SERVICE_NAME, HEALTH_SERVICE_NAME, reflection.SERVICE_NAME), server)
    bound = server.add_insecure_port(format_address(host, port))
    if bound == 0:
        raise RuntimeError(f"could not listen on {format_address(host, port)}")
    await server.start()
    for service in ("", SERVICE_NAME):
        await health_servicer.set(service, health_pb2.HealthCheckResponse.SERVING)
    return server, health_servicer, bound


def start_server(config: EngineConfig, host: str = "127.0.0.1", port: int = 0,
                 auth_tokens: dict[str, str] | None = None, max_waiting: int = 1024,
                 grace: float = 5.0) -> RunningServer:
    """Load the engine, start serving, and return once health says SERVING.

    `port=0` picks a free port (see `.port`). `auth_tokens` (token -> tenant) turns on bearer
    authentication. `max_waiting` bounds the engine's waiting queue (RESOURCE_EXHAUSTED
    beyond it); `grace` is the default drain time of `stop()`.
    """
    auth = TokenAuth(auth_tokens) if auth_tokens is not None else None
    engine_loop = EngineLoop(LLMEngine(config), max_waiting=max_waiting)
    engine_loop.start()
    loop = asyncio.new_event_loop()
    loop_thread = threading.Thread(target=loop.run_forever, name="agentix-grpc", daemon=True)
    loop_thread.start()
    try:
        server, health_servicer, bound = asyncio.run_coroutine_threadsafe(
            _start_grpc(engine_loop, auth, host, port), loop).result()
    except BaseException:
        engine_loop.stop()
        loop.call_soon_threadsafe(loop.stop)
        loop_thread.join()
        loop.close()
        raise
    return RunningServer(engine_loop, loop, loop_thread, server, health_servicer, host, bound,
                         grace)


def serve_forever(config: EngineConfig, host: str = "127.0.0.1", port: int = 0,
                  auth_tokens: dict[str, str] | None = None, max_waiting: int = 1024,
                  grace: float = 5.0,
                  on_ready: Callable[[RunningServer], None] | None = None) -> None:
    """Serve until SIGINT or SIGTERM, then stop cleanly (main thread only). `on_ready` is
    called once the server is SERVING."""
    signalled: list[int] = []  # the handler only appends: safe at any point of the loop
    previous = {sig: signal.signal(sig, lambda signum, _: signalled.append(signum))
                for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        running = start_server(config, host, port, auth_tokens, max_waiting, grace)
        try:
            if on_ready is not None:
                on_ready(running)
            while not signalled:
                time.sleep(0.1)
        finally:
            running.stop()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
