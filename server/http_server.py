"""Listening sockets and uvicorn HTTP servers on an asyncio loop: what a server and a router
serve HTTP with (the OpenAI door, /metrics), torch-free."""

from __future__ import annotations

import asyncio
import socket

from scheduler.addresses import format_address

HANDLER_GRACE = 1.0  # after the engine drained: time for handlers to send their last message
# Open HTTP connections and requests in flight one HTTP port serves at once; past it uvicorn
# answers 503 at once (idle or slow clients cannot grow the server without bound).
MAX_HTTP_CONNECTIONS = 2048


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on host:port (OSError naming the address when it is taken)."""
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host.strip("[]"), port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise OSError(exc.errno, f"cannot listen on {format_address(host, port)}: "
                                 f"{exc.strerror}") from None
    return sock


class HttpServer:
    """One uvicorn server on the event loop, on an already bound socket."""

    def __init__(self, app, sock: socket.socket) -> None:
        import uvicorn

        self.sock = sock
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(app, log_level="warning", lifespan="off", access_log=False,
                                timeout_graceful_shutdown=HANDLER_GRACE,
                                limit_concurrency=MAX_HTTP_CONNECTIONS)
        self._server = uvicorn.Server(config)
        self._task: asyncio.Task | None = None

    async def start(self) -> None:
        self._task = asyncio.ensure_future(self._server.serve(sockets=[self.sock]))
        while not self._server.started:
            if self._task.done():
                self._task.result()  # raises why it could not start
            await asyncio.sleep(0.01)

    async def stop(self) -> None:
        self._server.should_exit = True
        if self._task is not None:
            await self._task
        self.sock.close()

# The error of an `infer_programs` option without an HTTP door (serve and router alike).
INFER_NEEDS_HTTP = ("infer_programs: infers the programs of the HTTP door's chat requests, so "
                    "it needs http_port")
