"""Start and stop a server: the engine on its own thread (EngineLoop); on an asyncio event
loop on another thread, the grpc.aio server (health checking, reflection) and, when asked
for, the OpenAI-compatible HTTP server and a metrics-only HTTP server (uvicorn).

    running = start_server(EngineConfig(model=DIR, policy="atlas"), port=0, http_port=0)
    ... running.address ... running.http_address ...
    running.stop()          # NOT_SERVING, drain (grace), abort the rest, stop

Health reports SERVING for "" and "agentix.v1.Agentix" from when the model is loaded until
shutdown starts, except while the engine is stalled and, for good, once it broke (a
tensor-parallel worker died). Health, reflection and /metrics need no token; the Agentix
service and the OpenAI endpoints do when auth is on.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from engine import EngineConfig, LLMEngine
from scheduler.addresses import format_address
from scheduler.program_inference import ProgramInference
from server.auth import RouterTrust, TokenAuth
from server.door_backend import EngineBackend
from server.engine_loop import EngineLoop
from server.handlers import HEALTH_SERVICE_NAME, SERVICE_NAME, add_service
from server.http_server import HANDLER_GRACE, INFER_NEEDS_HTTP, HttpServer, bind_socket
from server.metrics import ServerMetrics
from server.limits import DEFAULT_MAX_PROMPT_BYTES, MESSAGE_OVERHEAD_BYTES
from server.passing_thread import in_passing_thread
from server.prompts import PromptTokenizer
from server.reasoning_parsers import reasoning_parser_class
from server.reasoning_parsers.vocabulary import check_vocabulary
from server.response_store import ResponseLimits, ResponseStore
from server.reflection import enable_reflection
from server.signals import StopSignals
from server.service import AgentixServicer
from server.tool_parsers import make_tool_parser

HEALTH_POLL_SECONDS = 0.5
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServeOptions:
    """What a server listens on and how it treats requests. A port of None is not served,
    0 picks a free one; at least one of `port` (gRPC) and `http_port` must be set.
    `auth_tokens` (token -> tenant) turns on bearer authentication; `max_waiting` bounds the
    engine's waiting queue; `grace` is the default drain time of `stop()`;
    `served_model_name` is the model's name over HTTP (default: the model directory's name);
    `metrics_port` serves /metrics alone (for a gRPC-only server); `metrics_tenant_label`
    adds a tenant label to the program histograms. `max_prompt_bytes` bounds a text
    prompt before it is tokenized; health turns NOT_SERVING when the engine has work and
    has made no progress for `health_stall_seconds`. `router_token` (None: off) is the
    token of the trusted router (server/router/): only a request whose metadata carries it
    (`x-agentix-router-token`) may set a program's priority value. `tool_call_parser`
    (None: off) turns on "auto" tool choice over HTTP and gRPC: chat outputs are parsed into
    tool calls in that format (`server.tool_parsers`). `reasoning_parser` (None: off) names
    the format of the model's reasoning (`server.reasoning_parsers`): chat outputs' reasoning
    is split off over HTTP (`reasoning_content`, Responses' reasoning items) and gRPC
    (`Final.reasoning`); `start_server` refuses it (ValueError naming it) when the model's
    tokenizer lacks the format's markers. `responses` bounds the stored Responses
    of the HTTP door (server/response_store.py). `infer_programs` (needs `http_port`)
    has the HTTP door infer the program of a chat request that names none from its
    messages (server/openai_http.py), for the engine's `program_ttl`."""

    host: str = "127.0.0.1"
    port: int | None = 0
    http_port: int | None = None
    metrics_port: int | None = None
    auth_tokens: dict[str, str] | None = None
    max_waiting: int = 1024
    grace: float = 5.0
    served_model_name: str | None = None
    metrics_tenant_label: bool = False
    max_prompt_bytes: int = DEFAULT_MAX_PROMPT_BYTES
    health_stall_seconds: float = 30.0
    router_token: str | None = field(default=None, repr=False)
    tool_call_parser: str | None = None
    reasoning_parser: str | None = None
    responses: ResponseLimits = ResponseLimits()
    infer_programs: bool = False

    def __post_init__(self) -> None:
        if self.port is None and self.http_port is None:
            raise ValueError("port: serve gRPC, HTTP or both (set port or http_port)")
        if self.infer_programs and self.http_port is None:
            raise ValueError(INFER_NEEDS_HTTP)
        for name in ("port", "http_port", "metrics_port"):
            value = getattr(self, name)
            if value is not None and not 0 <= value <= 65535:
                raise ValueError(f"{name}: must be in [0, 65535], got {value}")
        if self.max_waiting <= 0:
            raise ValueError(f"max_waiting: must be positive, got {self.max_waiting}")
        if self.grace < 0:
            raise ValueError(f"grace: must be >= 0, got {self.grace}")
        if self.max_prompt_bytes <= 0:
            raise ValueError(f"max_prompt_bytes: must be positive, got {self.max_prompt_bytes}")
        if not self.health_stall_seconds > 0:
            raise ValueError(f"health_stall_seconds: must be positive, got "
                             f"{self.health_stall_seconds}")
        if self.router_token is not None:
            RouterTrust(self.router_token)  # ValueError for an unusable token
        if self.tool_call_parser is not None:
            make_tool_parser(self.tool_call_parser)  # ValueError naming the supported ones
        if self.reasoning_parser is not None:
            reasoning_parser_class(self.reasoning_parser)  # ValueError naming the supported


@dataclass
class _Services:
    """What one server runs on its event loop (None / empty: not served)."""

    prompts: PromptTokenizer
    grpc_server: grpc.aio.Server | None = None
    health: health.aio.HealthServicer | None = None
    grpc_port: int | None = None
    http: dict[str, HttpServer] = field(default_factory=dict)
    health_watch: asyncio.Task | None = None


class RunningServer:
    """A started server. `address` (gRPC), `http_address` and `metrics_address` are where it
    listens (None when not served); `engine_loop` runs things on the engine thread
    (`engine_loop.call(fn)` returns `fn(engine)`); `stop()` shuts down."""

    def __init__(self, engine_loop: EngineLoop, loop: asyncio.AbstractEventLoop,
                 loop_thread: threading.Thread, services: _Services,
                 options: ServeOptions) -> None:
        self.engine_loop = engine_loop
        self.port = services.grpc_port
        self.address = (None if services.grpc_port is None
                        else format_address(options.host, services.grpc_port))
        self.http_address, self.metrics_address = (
            format_address(options.host, services.http[kind].port) if kind in services.http
            else None for kind in ("http", "metrics"))
        self.grace = options.grace
        self._loop = loop
        self._loop_thread = loop_thread
        self._services = services
        self._stop_lock = threading.Lock()
        self._stopped = False

    def stop(self, grace: float | None = None) -> None:
        """Report NOT_SERVING, refuse new programs and calls (UNAVAILABLE, HTTP 503), give
        calls in flight `grace` seconds (default: the server's) to finish, cut the rest
        (finish reason "shutdown"), then stop the servers, the engine thread and the event
        loop. Idempotent; blocks until done."""
        with self._stop_lock:
            if self._stopped:
                return
            self._stopped = True
        grace = self.grace if grace is None else grace
        try:
            asyncio.run_coroutine_threadsafe(self._shutdown(grace), self._loop).result()
        finally:
            _close(self.engine_loop, self._loop, self._loop_thread)
            self._services.prompts.close()

    async def _shutdown(self, grace: float) -> None:
        services = self._services
        if services.health_watch is not None:
            services.health_watch.cancel()
        if services.health is not None:
            await services.health.enter_graceful_shutdown()
        await self.engine_loop.drain(grace)
        if services.grpc_server is not None:
            await services.grpc_server.stop(HANDLER_GRACE)
        for server in services.http.values():
            await server.stop()


def _close(engine_loop: EngineLoop, loop: asyncio.AbstractEventLoop,
           loop_thread: threading.Thread) -> None:
    engine_loop.stop()
    loop.call_soon_threadsafe(loop.stop)
    loop_thread.join()
    loop.close()


async def _start_grpc(engine_loop: EngineLoop, prompts: PromptTokenizer,
                      auth: TokenAuth | None, host: str, port: int,
                      router: RouterTrust | None = None, tool_call_parser: str | None = None,
                      reasoning_parser: str | None = None
                      ) -> tuple[grpc.aio.Server, health.aio.HealthServicer, int]:
    # A message may carry a prompt at the limit plus room for the other fields.
    max_message = 2 * prompts.max_prompt_bytes + MESSAGE_OVERHEAD_BYTES
    server = grpc.aio.server(options=[("grpc.so_reuseport", 0),
                                      ("grpc.max_receive_message_length", max_message)])
    add_service(AgentixServicer(engine_loop, prompts, auth, router, tool_call_parser,
                                reasoning_parser), server)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    enable_reflection((SERVICE_NAME, HEALTH_SERVICE_NAME), server)
    bound = server.add_insecure_port(format_address(host, port))
    if bound == 0:
        raise OSError(f"cannot listen on {format_address(host, port)}")
    await server.start()
    for service in ("", SERVICE_NAME):
        await health_servicer.set(service, health_pb2.HealthCheckResponse.SERVING)
    return server, health_servicer, bound


async def _watch_health(engine_loop: EngineLoop, health_servicer: health.aio.HealthServicer
                        ) -> None:
    """Health follows the engine (`EngineLoop.unavailable`): NOT_SERVING while it is
    stalled, SERVING again once it makes progress; NOT_SERVING for good once it broke or
    draining began."""
    serving = True
    while not engine_loop.draining:
        why = engine_loop.unavailable()
        if (why is None) != serving:
            serving = why is None
            status = (health_pb2.HealthCheckResponse.SERVING if serving
                      else health_pb2.HealthCheckResponse.NOT_SERVING)
            if not serving:
                log.error("engine not serving: %s", why)
            for service in ("", SERVICE_NAME):
                await health_servicer.set(service, status)
        await asyncio.sleep(HEALTH_POLL_SECONDS)


async def _start_all(engine_loop: EngineLoop, prompts: PromptTokenizer,
                     metrics: ServerMetrics, options: ServeOptions,
                     sockets: dict[str, socket.socket], model_name: str,
                     inference: ProgramInference | None) -> _Services:
    auth = TokenAuth(options.auth_tokens) if options.auth_tokens is not None else None
    services = _Services(prompts)
    try:
        backend = EngineBackend(engine_loop)
        if "http" in sockets:
            from server.openai_app import build_app

            max_model_len, program_ttl = await engine_loop.run(
                lambda engine: (engine.max_model_len, engine.config.scheduler.program_ttl))
            services.http["http"] = HttpServer(
                build_app(backend, prompts, auth, model_name, max_model_len,
                          ResponseStore(options.responses, program_ttl),
                          options.tool_call_parser, metrics, options.reasoning_parser,
                          inference),
                sockets["http"])
        if "metrics" in sockets:
            from server.openai_app import build_metrics_app

            services.http["metrics"] = HttpServer(build_metrics_app(backend, metrics),
                                                  sockets["metrics"])
        for server in services.http.values():
            await server.start()
        if options.port is not None:
            router = (RouterTrust(options.router_token) if options.router_token is not None
                      else None)
            services.grpc_server, services.health, services.grpc_port = await _start_grpc(
                engine_loop, prompts, auth, options.host, options.port, router,
                options.tool_call_parser, options.reasoning_parser)
            services.health_watch = asyncio.ensure_future(
                _watch_health(engine_loop, services.health))
    except BaseException:
        for server in services.http.values():
            await server.stop()
        raise
    return services


def _check_reasoning_parser(name: str | None, engine: LLMEngine) -> None:
    """Nothing when the engine's tokenizer can be read by reasoning parser `name` (None:
    none); else the engine is closed and a ValueError names `reasoning_parser`."""
    if name is None:
        return
    try:
        check_vocabulary(name, engine.tokenizer)
    except ValueError as exc:
        engine.close()
        raise ValueError(f"reasoning_parser: {exc}") from None


def start_server(config: EngineConfig, options: ServeOptions | None = None, **kwargs
                 ) -> RunningServer:
    """Load the engine, start serving, and return once health says SERVING.

    `options` (or its fields as keywords: `start_server(config, port=0, http_port=0)`) say
    where to listen. The HTTP ports are bound before the model loads, so a taken port fails
    at once (OSError naming the address). A `reasoning_parser` whose markers the model's
    tokenizer lacks is a ValueError naming it, once the model has loaded (`agentix serve`
    checks it before).
    """
    options = options or ServeOptions(**kwargs)
    sockets: dict[str, socket.socket] = {}
    try:
        for kind, port in (("http", options.http_port), ("metrics", options.metrics_port)):
            if port is not None:
                sockets[kind] = bind_socket(options.host, port)
        metrics = ServerMetrics(options.metrics_tenant_label)
        engine = _load_engine(config)
        _check_reasoning_parser(options.reasoning_parser, engine)
    except BaseException:
        for sock in sockets.values():
            sock.close()
        raise
    engine.on_program_end(metrics.observe_program)
    engine_loop = EngineLoop(engine, max_waiting=options.max_waiting,
                             on_completion=metrics.observe_call,
                             stall_seconds=options.health_stall_seconds)
    prompts = PromptTokenizer(engine, options.max_prompt_bytes)
    engine_loop.start()
    loop = asyncio.new_event_loop()
    loop_thread = threading.Thread(target=loop.run_forever, name="agentix-io", daemon=True)
    loop_thread.start()
    model_name = options.served_model_name or Path(config.model).name
    try:
        services = asyncio.run_coroutine_threadsafe(
            _start_all(engine_loop, prompts, metrics, options, sockets, model_name,
                       ProgramInference(config.scheduler.program_ttl)
                       if options.infer_programs else None),
            loop).result()
    except BaseException:
        for sock in sockets.values():
            sock.close()
        _close(engine_loop, loop, loop_thread)
        prompts.close()
        raise
    return RunningServer(engine_loop, loop, loop_thread, services, options)


def _load_engine(config: EngineConfig) -> LLMEngine:
    """The engine, loaded in a passing thread so that only the engine loop's thread keeps a
    team of OpenMP workers (server/passing_thread.py); with tensor-parallel workers in this
    thread instead, since a worker's parent-death signal (PR_SET_PDEATHSIG) fires when the
    thread that started it ends."""
    if config.tensor_parallel_size > 1:
        return LLMEngine(config)
    return in_passing_thread(lambda: LLMEngine(config))


def serve_forever(config: EngineConfig, options: ServeOptions,
                  on_ready: Callable[[RunningServer], None] | None = None) -> None:
    """Serve until SIGINT or SIGTERM, then drain (`options.grace`) and stop (main thread
    only); a second signal, even during the model load, ends the process at once (status 1,
    no thread survives `os._exit`). `on_ready` is called once the server is SERVING; the
    drain's start and end are reported on stderr."""
    with StopSignals() as signals:
        signals.serve(start_server(config, options), on_ready, options.grace)
        print("agentix: stopped", file=sys.stderr, flush=True)
