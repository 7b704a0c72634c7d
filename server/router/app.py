"""Start and stop a router: on an asyncio event loop of its own thread, the grpc.aio server
(agentix.v1.Agentix from RouterServicer, grpc health, reflection), with `http_port` the
OpenAI door (uvicorn, server/router/http_backend.py; it serves the router's /metrics too),
with `metrics_port` /metrics and /health alone (server/router/metrics.py), one health/stats
poller per replica, and the TTL expiry of the router's program records.

    running = start_router(RouterOptions(replicas=("127.0.0.1:50051", "127.0.0.1:50052"),
                                         placement="agentix"))
    ... running.address ...
    running.stop()      # NOT_SERVING, refuse new work, let calls finish (grace), stop

Health says SERVING for "" and "agentix.v1.Agentix" while at least one replica does, and
NOT_SERVING from when shutdown starts; the service name "liveness" says SERVING from the start
until shutdown, whatever the replicas do (a liveness probe that must not restart the router,
and lose its program records, while no replica serves). `start_router` returns once one
replica has answered (its ModelInfo is read) or fails after `ready_timeout` seconds (0: waits
as long as it takes).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from scheduler.config import SchedulerConfig
from scheduler.placement import DEFAULT_CUTOFF, DEFAULT_PLACEMENT
from scheduler.placement.base import Placement
from scheduler.addresses import format_address
from scheduler.program_inference import ProgramInference
from server.auth import RouterTrust, TokenAuth
from server.handlers import HEALTH_SERVICE_NAME, SERVICE_NAME, add_service
from server.http_server import HANDLER_GRACE, INFER_NEEDS_HTTP, HttpServer, bind_socket
from server.limits import (DEFAULT_DNS_REFRESH_SECONDS, DEFAULT_MAX_PROMPT_BYTES,
                           MESSAGE_OVERHEAD_BYTES)
from server.reasoning_parsers import reasoning_parser_class
from server.reasoning_parsers.vocabulary import check_vocabulary
from server.reflection import enable_reflection
from server.response_store import ResponseLimits, ResponseStore
from server.router.core import Router
from server.router.discovery import Discovery, Resolver, parse_dns_name, resolve_dns
from server.router.programs import RouterPrograms
from server.router.prompts import RouterPrompts
from server.router.service import RouterServicer
from server.router.spawn import LocalReplicas
from server.signals import StopSignals
from server.tool_parsers import make_tool_parser

if TYPE_CHECKING:
    from server.prompts import PromptTokenizer

log = logging.getLogger(__name__)
EXPIRY_SECONDS = 1.0
LIVENESS_SERVICE = "liveness"  # health name that is SERVING while the router runs


@dataclass(frozen=True)
class RouterOptions:
    """A router's replicas (HOST:PORT, in index order) and/or `replicas_dns` names (NAME:PORT,
    re-resolved every `dns_refresh_seconds` by `resolver`: server.router.discovery; the
    `replicas` stay whatever they resolve to),
    placement policy (a registered name,
    see scheduler.placement, with its `cutoff` and its `placement_options`, (name, value)
    pairs; or a Placement object), where it listens,
    `model` (a model directory whose tokenizer sizes text prompts; None: estimated),
    `auth_tokens` (token -> tenant: the same file as the replicas'), `router_token` (sent to
    the replicas, which must have it to accept priority values; also what may set
    `program_priority` on this router), `grace` (drain time of `stop()`), `scheduler` (the
    router's process table settings: program TTL, tenant half-life, caps; the fold follows
    the replicas' policy from ModelInfo). `http_port` (None: not served, 0: a free one)
    serves the OpenAI door, which needs `model` (its tokenizer renders chats: with
    `chat_template`, the replicas' own), names the model `served_model_name` (default: the
    replicas' model directory's name), parses tool calls with `tool_call_parser` (None:
    "auto" tool choice refused) and reasoning with `reasoning_parser` (None: off; it needs
    `model`, whose tokenizer must have the format's markers: ValueError naming it at start
    otherwise) and keeps stored Responses within `responses` (TTL default: `scheduler`'s
    program TTL); `infer_programs` (needs `http_port`) has it infer the program of a chat
    request that names none from its messages, for the TTL of `scheduler`.
    `metrics_port` (None: not served, 0: a free one) serves
    the router's /metrics and /health alone; the OpenAI door serves /metrics too."""

    replicas: tuple[str, ...]
    replicas_dns: tuple[str, ...] = ()
    dns_refresh_seconds: float = DEFAULT_DNS_REFRESH_SECONDS
    resolver: Resolver = field(default=resolve_dns, compare=False, repr=False)
    placement: str | Placement = field(default=DEFAULT_PLACEMENT, compare=False)
    cutoff: int | str = DEFAULT_CUTOFF
    placement_options: tuple[tuple[str, object], ...] = ()
    host: str = "127.0.0.1"
    port: int = 0
    http_port: int | None = None
    metrics_port: int | None = None
    model: str | None = None
    chat_template: str | None = None
    served_model_name: str | None = None
    tool_call_parser: str | None = None
    reasoning_parser: str | None = None
    responses: ResponseLimits = ResponseLimits()
    infer_programs: bool = False
    auth_tokens: dict[str, str] | None = field(default=None, repr=False)
    router_token: str | None = field(default=None, repr=False)
    grace: float = 5.0
    max_prompt_bytes: int = DEFAULT_MAX_PROMPT_BYTES
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    poll_seconds: float = 0.5
    ready_timeout: float = 120.0  # 0: no limit

    def __post_init__(self) -> None:
        object.__setattr__(self, "replicas", tuple(self.replicas))  # checked at start
        object.__setattr__(self, "replicas_dns", tuple(self.replicas_dns))
        for name in self.replicas_dns:
            parse_dns_name(name)
        if not self.dns_refresh_seconds > 0:
            raise ValueError(f"dns_refresh_seconds: must be positive, got "
                             f"{self.dns_refresh_seconds}")
        for name in ("port", "http_port", "metrics_port"):
            value = getattr(self, name)
            if value is not None and not 0 <= value <= 65535:
                raise ValueError(f"{name}: must be in [0, 65535], got {value}")
        if self.http_port is not None and self.model is None:
            raise ValueError("http_port: the router's OpenAI door needs model (its tokenizer "
                             "renders chats and sizes prompts)")
        if self.chat_template is not None and self.model is None:
            raise ValueError("chat_template: needs model (the tokenizer it replaces the "
                             "template of)")
        if self.tool_call_parser is not None:
            make_tool_parser(self.tool_call_parser)  # ValueError naming the supported ones
        if self.infer_programs and self.http_port is None:
            raise ValueError(INFER_NEEDS_HTTP)
        if self.reasoning_parser is not None:
            reasoning_parser_class(self.reasoning_parser)  # ValueError naming the supported
            if self.model is None:
                raise ValueError("reasoning_parser: needs model (its tokenizer must have the "
                                 "format's markers)")
        if self.grace < 0:
            raise ValueError(f"grace: must be >= 0, got {self.grace}")
        if not self.ready_timeout >= 0:
            raise ValueError(f"ready_timeout: must be >= 0 (0: no limit), got "
                             f"{self.ready_timeout}")
        if not self.poll_seconds > 0:
            raise ValueError(f"poll_seconds: must be positive, got {self.poll_seconds}")
        if self.cutoff != "auto" and not (isinstance(self.cutoff, int) and self.cutoff >= 0):
            raise ValueError(f"cutoff: must be a token count >= 0 or 'auto', got "
                             f"{self.cutoff!r}")
        if self.router_token is not None:
            RouterTrust(self.router_token)


def make_placement(spec: str | Placement, cutoff: int | str,
                   options: tuple[tuple[str, object], ...] = ()) -> Placement:
    """The placement object of a name (scheduler.placement's registry) with its `options`,
    or the object itself (ValueError for an unknown name or option, or options given with
    an object)."""
    if isinstance(spec, Placement):
        if options:
            raise ValueError("placement_options: only with a placement name")
        return spec
    try:
        from scheduler.placement import make_placement as registry
    except ImportError:
        raise ValueError("placement: the registry scheduler.placement.make_placement is not "
                         "available; pass a Placement object") from None
    return registry(spec, cutoff=cutoff, **dict(options))


class RunningRouter:
    """A started router: `address` is where it listens (gRPC), `http_address` its OpenAI
    door and `metrics_address` its metrics port (None: not served), `router` its state (for
    tests: run things on its loop with `call(fn)`), `stop()` shuts it down."""

    def __init__(self, options: RouterOptions) -> None:
        self.options = options
        self.placement = make_placement(options.placement, options.cutoff,
                                        options.placement_options)
        self.prompts = RouterPrompts(options.model, options.max_prompt_bytes,
                                     options.chat_template)
        if options.reasoning_parser is not None:
            try:
                check_vocabulary(options.reasoning_parser, self.prompts.tokenizer)
            except ValueError as exc:
                self.prompts.close()
                raise ValueError(f"reasoning_parser: {exc}") from None
        self.router: Router | None = None  # made on the loop (grpc.aio channels belong to it)
        self.servicer: RouterServicer | None = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="agentix-router",
                                        daemon=True)
        self._tasks: list[asyncio.Task] = []  # DNS discovery
        self._watch_task: asyncio.Task | None = None
        self._server: grpc.aio.Server | None = None
        self._health: health.aio.HealthServicer | None = None
        self._stopped = False
        self._lock = threading.Lock()
        self._sockets: dict[str, socket.socket] = {}  # "http", "metrics": bound at start
        self._http: dict[str, HttpServer] = {}
        self._door_prompts: PromptTokenizer | None = None
        self.port: int | None = None
        self.address: str | None = None
        self.http_address: str | None = None
        self.metrics_address: str | None = None

    def call(self, fn: Callable, timeout: float = 30.0):
        """Run `fn()` on the router's loop and return its result (tests, tools)."""
        async def run():
            return fn()
        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(timeout)

    # ----- start ------------------------------------------------------------------------
    def start(self, should_stop: Callable[[], bool] | None = None) -> RunningRouter:
        """Serve once a replica has answered (TimeoutError after `ready_timeout`;
        InterruptedError when `should_stop()` turns true while waiting; OSError naming the
        address when the HTTP or metrics port is taken, before any wait)."""
        try:
            for kind, port in (("http", self.options.http_port),
                               ("metrics", self.options.metrics_port)):
                if port is not None:
                    self._sockets[kind] = bind_socket(self.options.host, port)
        except OSError:
            self._close_sockets()
            raise
        self._thread.start()
        try:
            asyncio.run_coroutine_threadsafe(self._start(should_stop), self._loop).result()
        except BaseException:
            asyncio.run_coroutine_threadsafe(self._stop_tasks(), self._loop).result()
            self._close()
            raise
        return self

    async def _start(self, should_stop: Callable[[], bool] | None) -> None:
        options = self.options
        self.router = Router(options.replicas, self.placement,
                             RouterPrograms(options.scheduler), options.auth_tokens,
                             options.router_token, options.poll_seconds,
                             discovered=bool(options.replicas_dns))
        self.servicer = RouterServicer(
            self.router, self.prompts,
            TokenAuth(options.auth_tokens) if options.auth_tokens is not None else None,
            RouterTrust(options.router_token) if options.router_token is not None else None)
        self.router.start()
        if options.replicas_dns:
            discovery = Discovery(self.router, options.replicas_dns, options.resolver,
                                  options.dns_refresh_seconds)
            await discovery.refresh()
            self._tasks.append(asyncio.ensure_future(discovery.run()))
        deadline = time.monotonic() + options.ready_timeout
        while self.router.model_info() is None:
            if should_stop is not None and should_stop():
                raise InterruptedError("router: stopped before a replica answered")
            if options.ready_timeout and time.monotonic() > deadline:
                named = ", ".join(options.replicas + options.replicas_dns)
                raise TimeoutError(f"router: no replica answered within "
                                   f"{options.ready_timeout:g} s ({named})")
            await asyncio.sleep(0.05)
        max_message = 2 * options.max_prompt_bytes + MESSAGE_OVERHEAD_BYTES
        server = grpc.aio.server(options=[("grpc.so_reuseport", 0),
                                          ("grpc.max_receive_message_length", max_message)])
        add_service(self.servicer, server)
        self._health = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        enable_reflection((SERVICE_NAME, HEALTH_SERVICE_NAME), server)
        self.port = server.add_insecure_port(format_address(options.host, options.port))
        if self.port == 0:
            raise OSError(f"cannot listen on {format_address(options.host, options.port)}")
        await server.start()
        self._server = server
        self.address = format_address(options.host, self.port)
        if "http" in self._sockets:
            await self._start_http()
        if "metrics" in self._sockets:
            from server.router.http_backend import RouterBackend
            from server.router.metrics import build_router_metrics_app

            app = build_router_metrics_app(self.router, RouterBackend(self.servicer))
            self.metrics_address = await self._serve_http("metrics", app)
        self._watch_task = asyncio.ensure_future(self._watch())
        await self._set_health(True)
        await self._health.set(LIVENESS_SERVICE, health_pb2.HealthCheckResponse.SERVING)

    async def _start_http(self) -> None:
        """The OpenAI door on this loop, sized by the first replica's ModelInfo (it imports
        the engine's text codec, and so torch: only a router with a door does)."""
        from engine.text_codec import TextCodec
        from server.openai_app import build_app
        from server.prompts import PromptTokenizer
        from server.router.http_backend import RouterBackend
        from server.router.metrics import add_router_metrics

        info = self.router.model_info()
        codec = TextCodec(self.prompts.tokenizer, info.vocab_size, info.max_model_len)
        self._door_prompts = PromptTokenizer(codec, self.options.max_prompt_bytes)
        inference = (ProgramInference(self.options.scheduler.program_ttl)
                     if self.options.infer_programs else None)
        app = build_app(RouterBackend(self.servicer), self._door_prompts, self.servicer.auth,
                        self.options.served_model_name or info.model, info.max_model_len,
                        ResponseStore(self.options.responses,
                                      self.options.scheduler.program_ttl),
                        self.options.tool_call_parser,
                        reasoning_parser=self.options.reasoning_parser, inference=inference)
        self.http_address = await self._serve_http("http", add_router_metrics(app,
                                                                              self.router))

    async def _serve_http(self, kind: str, app) -> str:
        """Serve `app` on the `kind` socket bound at start; its address."""
        server = self._http[kind] = HttpServer(app, self._sockets[kind])
        await server.start()
        return format_address(self.options.host, server.port)

    async def _set_health(self, serving: bool) -> None:
        status = (health_pb2.HealthCheckResponse.SERVING if serving
                  else health_pb2.HealthCheckResponse.NOT_SERVING)
        for service in ("", SERVICE_NAME):
            await self._health.set(service, status)

    async def _watch(self) -> None:
        """Router health follows its replicas'; expired programs end everywhere."""
        serving = True
        last_expiry = time.monotonic()
        while True:
            now_serving = bool(self.router.healthy())
            if now_serving != serving:
                serving = now_serving
                await self._set_health(serving)
            if time.monotonic() - last_expiry >= EXPIRY_SECONDS:
                last_expiry = time.monotonic()
                try:
                    await self.router.expire()
                except Exception:
                    log.exception("router: program expiry failed")
            await asyncio.sleep(self.options.poll_seconds / 2)

    # ----- stop -------------------------------------------------------------------------
    def stop(self, grace: float | None = None) -> None:
        """NOT_SERVING, refuse new programs and calls (UNAVAILABLE), give calls in flight
        `grace` seconds (default: the options'), then stop. Idempotent; blocks until done."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
        grace = self.options.grace if grace is None else grace
        try:
            asyncio.run_coroutine_threadsafe(self._shutdown(grace), self._loop).result()
        finally:
            self._close()

    async def _shutdown(self, grace: float) -> None:
        if self.servicer is not None:
            self.servicer.draining = True
        if self._watch_task is not None:
            self._watch_task.cancel()  # NOT_SERVING from now on
        if self._health is not None:
            await self._health.enter_graceful_shutdown()
        deadline = time.monotonic() + grace
        while self.router is not None and self.router.calls and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        if self._server is not None:
            await self._server.stop(HANDLER_GRACE)
        for server in self._http.values():
            await server.stop()
        await self._stop_tasks()

    async def _stop_tasks(self) -> None:
        tasks = self._tasks + ([self._watch_task] if self._watch_task is not None else [])
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self.router is not None:
            await self.router.close()

    def _close(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()
        self.prompts.close()
        if self._door_prompts is not None:
            self._door_prompts.close()
        self._close_sockets()

    def _close_sockets(self) -> None:
        for sock in self._sockets.values():
            sock.close()


def start_router(options: RouterOptions | None = None, **kwargs) -> RunningRouter:
    """Start a router (`options`, or its fields as keywords) and return once it serves."""
    return RunningRouter(options or RouterOptions(**kwargs)).start()


def serve_router_forever(options: RouterOptions,
                         on_ready: Callable[[RunningRouter], None] | None = None,
                         local: LocalReplicas | None = None) -> None:
    """Serve until SIGINT or SIGTERM, then drain (`options.grace`) and stop (main thread
    only); a second signal ends the process at once (status 1; local replicas die with it,
    see spawn.py). With `local`, its replica processes are started first (their addresses
    replace `options.replicas`) and stopped after the router, however it exits. The drain's
    start and end are reported on stderr."""
    with StopSignals() as signals, contextlib.ExitStack() as stack:
        if local is not None:
            local.should_stop = lambda: signals.received
            stack.enter_context(local)
            options = dataclasses.replace(options, replicas=tuple(local.addresses))
        if signals.received:
            return
        try:
            running = RunningRouter(options).start(lambda: signals.received)
        except InterruptedError:
            return
        signals.serve(running, on_ready, options.grace)
    print("agentix: stopped", file=sys.stderr, flush=True)
