"""The `agentix` command line. `agentix demo` serves SmolLM2 and runs three agent programs
against it; `agentix generate` answers a few chat prompts offline; `agentix serve` runs the
server (gRPC, OpenAI-compatible HTTP, or both) until SIGINT or SIGTERM, its arguments checked
before the model loads (server/cli_checks.py), or with `--replicas N` N local replica
processes behind a router; `agentix router` routes over replicas running elsewhere;
`agentix top` watches one server live.
Building the parser imports no torch. A bad argument is one line on stderr, status 2."""

from __future__ import annotations

import argparse
import time
from typing import Callable, NoReturn

from scheduler.config import KV_MEMORY_MODES, PREEMPTION_MODES, SchedulerConfig
from scheduler.policies import DEFAULT_POLICY, POLICIES
from server.cli_checks import (DEFAULT_PLACEMENT, PLACEMENT_NAMES, UsageError, replicas_setup,
                               router_setup, serve_setup)
from server.config_flags import (parse_cutoff, parse_override, parse_placement_option,
                                 positive_float)
from server.limits import (DEFAULT_DNS_REFRESH_SECONDS, DEFAULT_MAX_PROMPT_BYTES,
                           DEFAULT_RESPONSES_MAX_BYTES, DEFAULT_RESPONSES_PER_TENANT)
from server.reasoning_parsers import REASONING_PARSERS
from server.tool_parsers import TOOL_PARSERS

# engine/config.py's DTYPES and engine-only defaults, repeated because `import engine` imports
# torch; tests/server/test_cli_checks.py pins them to EngineConfig's.
DTYPES = ("float32", "float16", "bfloat16", "float64")
KV_CACHE_MEMORY_GB = 1.0
SCHEDULER = SchedulerConfig()  # the scheduler fields' defaults

DEFAULT_PROMPTS = (
    "What is the capital of France?",
    "Give me three tips for staying focused while studying.",
    "Write a haiku about the sea.",
    "Explain in one sentence what a CPU does.",
)


def _generate(args: argparse.Namespace) -> None:
    from engine import LLM, SamplingParams
    from engine.models.smollm2 import ensure_smollm2_dir

    model = args.model or str(ensure_smollm2_dir())
    llm = LLM(model, dtype=args.dtype, device=args.device, policy=args.policy)
    tokenizer = llm.engine.tokenizer
    if tokenizer is None:
        raise SystemExit(f"{model} has no tokenizer: agentix generate needs one")
    prompts = args.prompt or list(DEFAULT_PROMPTS)
    params = SamplingParams(temperature=args.temperature, top_p=args.top_p, seed=args.seed,
                            max_tokens=args.max_tokens)
    started = time.perf_counter()
    outputs = llm.generate([tokenizer.chat_prompt(p) for p in prompts], params)
    seconds = time.perf_counter() - started
    for prompt, out in zip(prompts, outputs):
        print(f"### {prompt}\n{out.text.strip()}\n[{len(out.token_ids)} tokens, "
              f"finish={out.finish_reason}]\n")
    total = sum(len(o.token_ids) for o in outputs)
    print(f"{len(outputs)} calls, {total} tokens in {seconds:.1f}s "
          f"({total / seconds:.1f} tokens/s) on {args.device}")


def _serve(args: argparse.Namespace) -> None:
    if args.node_rank > 0:
        _serve_node(args)
        return
    if args.replicas is not None:
        _serve_replicas(args)
        return
    config, options = serve_setup(args)
    from server.app import serve_forever

    def ready(running) -> None:
        _print_serving(("agentix", running.address), ("http", running.http_address),
                       ("metrics", running.metrics_address))

    serve_forever(config, options, on_ready=ready)


def _print_serving(*addresses: tuple[str, str | None]) -> None:
    """One "LABEL serving on ADDRESS" line per address served (None: not served)."""
    for label, address in addresses:
        if address is not None:
            print(f"{label} serving on {address}", flush=True)


def _serve_node(args: argparse.Namespace) -> None:
    """`agentix serve --node-rank R` (R > 0): this node's tensor-parallel ranks of the
    engine that node 0 runs (engine.parallel.nodes); exits with their status."""
    if args.dist_init_addr is None:
        raise UsageError("--node-rank: needs --dist-init-addr HOST:PORT (node 0's)")
    from engine.parallel.nodes import serve_node

    try:
        status = serve_node(args.node_rank, args.nnodes, args.tensor_parallel_size,
                            args.dist_init_addr)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    raise SystemExit(status)


def _serve_replicas(args: argparse.Namespace) -> None:
    """`agentix serve --replicas N`: N local `agentix serve` processes behind a router in
    this process, on one address ("agentix serving on HOST:PORT", after one "replica I
    serving on ADDRESS" line each)."""
    local, options = replicas_setup(args, _child_serve_args)
    from server.router.app import serve_router_forever

    def ready(running) -> None:
        for i, address in enumerate(local.addresses):
            print(f"replica {i} serving on {address}", flush=True)
        _print_serving(("agentix", running.address), ("http", running.http_address),
                       ("metrics", running.metrics_address))

    from server.router.spawn import ReplicaStartError

    try:
        serve_router_forever(options, on_ready=ready, local=local)
    except (ReplicaStartError, TimeoutError) as exc:
        raise SystemExit(f"agentix serve: {exc}") from None


# `agentix serve` flags a replica child does not get from its parent (it gets its own).
_PARENT_ONLY = frozenset({"help", "replicas", "placement", "cutoff", "placement_option",
                          "host", "port", "no_grpc", "http_port", "metrics_port",
                          "router_token_file", "model", "infer_programs"})


def _child_serve_args(args: argparse.Namespace, model: str) -> list[str]:
    """The `agentix serve` arguments of a local replica: every engine and serving flag as
    the parent got it (defaults included), `--model` resolved, no port or router flags."""
    out = ["--model", model]
    for action in args.serve_parser._actions:
        if action.dest in _PARENT_ONLY or not action.option_strings:
            continue
        value = getattr(args, action.dest, None)
        flag = action.option_strings[0]
        if isinstance(action, argparse._StoreTrueAction):
            out += [flag] if value else []
        elif isinstance(action, argparse._AppendAction):
            for name, item in value or ():
                out += [flag, f"{name}={item!r}"]
        elif value is not None:
            out += [flag, str(value)]
    return out


def _router(args: argparse.Namespace) -> None:
    options = router_setup(args)
    from server.router.app import serve_router_forever

    def ready(running) -> None:
        _print_serving(("agentix router", running.address), ("http", running.http_address),
                       ("metrics", running.metrics_address))

    try:
        serve_router_forever(options, on_ready=ready)
    except TimeoutError as exc:
        raise SystemExit(f"agentix router: {exc}") from None


def _top(args: argparse.Namespace) -> None:
    from server.top import TopError, run

    try:
        run(args.address, token=args.token, interval=args.interval, top=args.top,
            once=args.once)
    except TopError as exc:
        raise SystemExit(f"agentix top: {exc}") from None


def _demo(args: argparse.Namespace) -> None:
    from server.demo import main as run_demo

    run_demo(model=args.model, dtype=args.dtype)


def _bench(args: argparse.Namespace) -> None:
    """`agentix bench ...` is `bench.cli`'s command line (all arguments passed through)."""
    from bench.cli import main as bench_main

    bench_main(args.bench_args)


class _Parser(argparse.ArgumentParser):
    """Reports an error in one line, `PROG: error: MESSAGE`, status 2 (no usage)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Appends each option's default; a None default's meaning is in the help text itself."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        return action.help if action.default is None else super()._get_help_string(action)


def _add_serve_parser(sub) -> None:
    serve = sub.add_parser("serve", formatter_class=_HelpFormatter,
                           help="run the server: gRPC (agentix.v1.Agentix), OpenAI HTTP or both")
    serve.add_argument("--model", metavar="DIR",
                       help="HF model directory (default: SmolLM2-135M-Instruct, "
                            "converted once from the installed GGUF file)")
    serve.add_argument("--policy", choices=list(POLICIES), default=DEFAULT_POLICY,
                       help="scheduling policy (EngineConfig's default, chosen on the "
                            "steady-state tables of "
                            "bench/notes/2026-12-01-learnt-scheduling.md)")
    serve.add_argument("--host", default="127.0.0.1", help="the address every port listens on")
    grpc_port = serve.add_mutually_exclusive_group()
    grpc_port.add_argument("--port", type=int, default=50051,
                           help="gRPC port (0: pick a free one)")
    grpc_port.add_argument("--no-grpc", action="store_true",
                           help="serve no gRPC: an HTTP-only server (needs --http-port)")
    serve.add_argument("--http-port", type=int, metavar="PORT",
                       help="OpenAI-compatible HTTP port (0: pick a free one; default: off)")
    serve.add_argument("--metrics-port", type=int, metavar="PORT",
                       help="a port serving /metrics alone, e.g. next to gRPC only (0: pick a "
                            "free one; default: off; the HTTP port serves /metrics too; with "
                            "--replicas, the router's)")
    serve.add_argument("--served-model-name", metavar="NAME",
                       help="the model's name over HTTP (default: the model directory's name)")
    serve.add_argument("--metrics-tenant-label", action="store_true",
                       help="label the program histograms of /metrics by tenant")
    serve.add_argument("--auth-token-file", metavar="FILE",
                       help="'TOKEN TENANT' lines: turns on bearer auth, tenant namespaces "
                            "for ids and anti-gaming (default: off; without auth the tenant "
                            "is whatever a client says, so tenant accounting cannot stop "
                            "priority gaming)")
    serve.add_argument("--max-prompt-bytes", type=int, default=DEFAULT_MAX_PROMPT_BYTES,
                       metavar="N", help="a text prompt larger than this (UTF-8) is refused "
                                         "before it is tokenized")
    _add_responses_flags(serve)
    serve.add_argument("--health-stall-seconds", type=positive_float, default=30.0,
                       metavar="S", help="health turns NOT_SERVING when the engine has work "
                                         "and makes no progress for this long")
    serve.add_argument("--max-waiting", type=int, default=1024, metavar="N",
                       help="waiting calls beyond which a new call is refused "
                            "(RESOURCE_EXHAUSTED, HTTP 429)")
    serve.add_argument("--grace", type=float, default=5.0, metavar="S",
                       help="seconds calls in flight get to finish on shutdown (a second "
                            "signal exits at once)")
    _add_tool_flags(serve)
    _add_reasoning_flag(serve)
    _add_infer_flag(serve)
    serve.add_argument("--router-token-file", metavar="FILE",
                       help="a file holding the token of a trusted router: only requests "
                            "carrying it (x-agentix-router-token) may set a program's "
                            "priority value (default: no router is trusted)")
    serve.add_argument("--replicas", type=_positive_int, metavar="N",
                       help="run N local replica processes (each on a free loopback port, "
                            "same model and engine flags) behind a router on --host/--port "
                            "(gRPC only; default: one engine in this process)")
    _add_placement_flags(serve, "with --replicas: ")
    engine = serve.add_argument_group(
        "engine", "EngineConfig fields (engine/config.py); --set sets any other one")
    engine.add_argument("--dtype", choices=DTYPES, default="float32", help="weights and KV")
    engine.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    engine.add_argument("--tensor-parallel-size", type=_positive_int, default=1, metavar="N",
                        help="split the model over N ranks: N devices from --device on CUDA, "
                             "N processes on the CPU (the engine starts them itself)")
    engine.add_argument("--nnodes", type=_positive_int, default=1, metavar="N",
                        help="spread the tensor-parallel ranks over N machines (SGLang's "
                             "flag): run this command on each, with its --node-rank")
    engine.add_argument("--node-rank", type=int, default=0, metavar="R",
                        help="this machine's node (0: the engine and scheduler; others run "
                             "only their ranks, with node 0's engine settings)")
    engine.add_argument("--dist-init-addr", metavar="HOST:PORT",
                        help="where node 0 listens for the other nodes (torch.distributed "
                             "store; reachable by the cluster's nodes only; default: none, "
                             "one node)")
    engine.add_argument("--chat-template", metavar="FILE",
                        help="render chat prompts with this Jinja template (e.g. "
                             "engine/chat_templates/chatml_tools.jinja: tools for ChatML "
                             "models, hermes-style calls; default: the model's own)")
    engine.add_argument("--no-prefix-caching", action="store_true",
                        help="turn the prefix cache off")
    engine.add_argument("--kv-memory", choices=KV_MEMORY_MODES, default=SCHEDULER.kv_memory,
                        help="what the prefix cache keeps: 'program' (priority-ranked, "
                             "retention across tool calls) or 'lru'")
    engine.add_argument("--preemption-mode", choices=PREEMPTION_MODES,
                        default=SCHEDULER.preemption_mode,
                        help="what a preempted call's KV becomes (auto: the cheapest each time)")
    engine.add_argument("--num-kv-blocks", type=int, metavar="N",
                        help="device KV blocks (default: sized from --kv-cache-memory-gb)")
    engine.add_argument("--kv-cache-memory-gb", type=float, default=KV_CACHE_MEMORY_GB,
                        metavar="GB", help="device memory for the KV cache")
    engine.add_argument("--num-host-blocks", type=int, default=0, metavar="N",
                        help="host KV blocks: swap space and the prefix cache's host tier")
    engine.add_argument("--max-num-seqs", type=int, default=SCHEDULER.max_num_seqs,
                        metavar="N", help="running calls at most")
    engine.add_argument("--multistep", type=int, default=SCHEDULER.multistep, metavar="N",
                        help="decode steps per scheduling round (a call that arrives ends the "
                             "round; --set multistep_yields=False: it waits for the round's end)")
    engine.add_argument("--ttft-slo-tokens", type=_non_negative_int,
                        default=SCHEDULER.ttft_slo_tokens or 0, metavar="N",
                        help="first-token deadline as the time this engine takes to prefill N "
                             "tokens: a call still without a token by then (less its own "
                             "prefill) is promoted (0: off; --set ttft_slo_seconds=S sets it "
                             "in seconds instead, and a request may set its own)")
    engine.add_argument("--program-ttl", type=float, default=SCHEDULER.program_ttl,
                        metavar="S", help="seconds an idle program lives before it expires")
    engine.add_argument("--set", type=parse_override, action="append", default=[],
                        metavar="FIELD=VALUE",
                        help="any other EngineConfig field, VALUE a Python literal "
                             "(repeatable), e.g. --set block_size=32 --set starvation_beta=None")
    serve.set_defaults(run=_serve, serve_parser=serve)


def _int_at_least(low: int, name: str) -> Callable[[str], int]:
    """An argparse type: an int >= `low` (argparse names `name` for a non-int)."""
    def parse(text: str) -> int:
        value = int(text)
        if value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, got {text}")
        return value

    parse.__name__ = name
    return parse


_positive_int = _int_at_least(1, "positive int")
_non_negative_int = _int_at_least(0, "non-negative int")


def _add_placement_flags(parser: argparse.ArgumentParser, prefix: str = "") -> None:
    parser.add_argument("--placement", choices=PLACEMENT_NAMES, default=DEFAULT_PLACEMENT,
                        help=f"{prefix}which replica a call goes to (scheduler/placement/)")
    parser.add_argument("--cutoff", type=parse_cutoff, default=2048, metavar="N|auto",
                        help=f"{prefix}the cutoff placement's prompt-token cutoff: shorter "
                             f"calls go to the least-loaded replica, longer ones to their "
                             f"program's pinned replica ('auto': adapted from observed cache "
                             f"hits and queue times)")
    parser.add_argument("--placement-option", action="append", default=[],
                        type=parse_placement_option, metavar="NAME=VALUE",
                        help=f"{prefix}an option of the placement, repeatable (e.g. "
                             f"new_program_weight=0 for agentix; see scheduler/placement/)")


def _add_tool_flags(parser) -> None:
    """vLLM's pair: "auto" tool choice, and the format it parses calls from."""
    parser.add_argument("--enable-auto-tool-choice", action="store_true",
                        help="HTTP: parse chat outputs into tool calls when a request offers "
                             "tools with tool_choice auto (needs --tool-call-parser)")
    parser.add_argument("--tool-call-parser", choices=sorted(TOOL_PARSERS), metavar="NAME",
                        help="the format tool calls are parsed from: "
                             f"{', '.join(sorted(TOOL_PARSERS))} (default: none)")


def _add_infer_flag(parser) -> None:
    parser.add_argument("--infer-programs", action="store_true",
                        help="HTTP (needs --http-port): a chat request naming no program "
                             "joins the program of the earlier request of its tenant whose "
                             "messages it extends (within --program-ttl), else starts one "
                             "ended by TTL; off by default: unrelated conversations that "
                             "open alike would share a program (README, 'Programs for "
                             "unmodified chat clients')")


def _add_reasoning_flag(parser) -> None:
    """vLLM's --reasoning-parser: chat outputs' reasoning split off over HTTP (and gRPC)."""
    parser.add_argument("--reasoning-parser", choices=sorted(REASONING_PARSERS), metavar="NAME",
                        help="the format reasoning is parsed from (vLLM's names: "
                             f"{', '.join(sorted(REASONING_PARSERS))}); the model's tokenizer "
                             "must have its markers as tokens (default: none)")


def _add_responses_flags(parser) -> None:
    """The bounds of the HTTP door's stored Responses (server/response_store.py)."""
    parser.add_argument("--responses-per-tenant", type=_positive_int,
                        default=DEFAULT_RESPONSES_PER_TENANT, metavar="N",
                        help="HTTP: stored Responses per tenant; storing one more evicts the "
                             "tenant's least recently used")
    parser.add_argument("--responses-max-bytes", type=_positive_int,
                        default=DEFAULT_RESPONSES_MAX_BYTES, metavar="N",
                        help="HTTP: stored Responses in all, as JSON bytes; past it the least "
                             "recently used are evicted")
    parser.add_argument("--responses-ttl", type=positive_float, metavar="S",
                        help="HTTP: seconds a stored response lives after its last use "
                             "(default: --program-ttl, so a chain and its program expire "
                             "together)")


def _add_router_parser(sub) -> None:
    router = sub.add_parser("router", formatter_class=_HelpFormatter,
                            help="route agentix.v1.Agentix over running replicas (same API)")
    router.add_argument("--replica", action="append", default=[], metavar="HOST:PORT",
                        help="a replica's gRPC address (repeatable; index = order given)")
    router.add_argument("--replicas-dns", action="append", default=[], metavar="NAME:PORT",
                        help="route to every address NAME resolves to (e.g. a Kubernetes "
                             "headless Service), re-resolved every --dns-refresh seconds: "
                             "new replicas join, vanished ones drain; --replica ones "
                             "stay (repeatable)")
    router.add_argument("--dns-refresh", type=positive_float,
                        default=DEFAULT_DNS_REFRESH_SECONDS,
                        metavar="S", help="seconds between two resolutions of --replicas-dns")
    _add_placement_flags(router)
    router.add_argument("--host", default="127.0.0.1", help="the address the router listens on")
    router.add_argument("--port", type=int, default=50051, help="gRPC port (0: a free one)")
    router.add_argument("--http-port", type=int, metavar="PORT",
                        help="also serve the OpenAI API here, in front of the replicas "
                             "(needs --model; default: off; it serves /metrics too)")
    router.add_argument("--metrics-port", type=int, metavar="PORT",
                        help="a port serving the router's /metrics and /health alone (0: pick "
                             "a free one; default: off)")
    router.add_argument("--model", metavar="DIR",
                        help="the replicas' model directory: only its tokenizer is loaded, "
                             "to size text prompts for placement and render the HTTP door's "
                             "chats (default: sizes estimated from bytes, no prefix hashes)")
    router.add_argument("--served-model-name", metavar="NAME",
                        help="the model's name over HTTP (default: the replicas' model "
                             "directory's name)")
    router.add_argument("--chat-template", metavar="FILE",
                        help="the replicas' --chat-template, for the HTTP door's chats "
                             "(default: the model's own)")
    _add_tool_flags(router)
    _add_reasoning_flag(router)
    _add_infer_flag(router)
    router.add_argument("--auth-token-file", metavar="FILE",
                        help="'TOKEN TENANT' lines, the replicas' own file: the router "
                             "authenticates and forwards the client's token (default: off)")
    router.add_argument("--router-token-file", metavar="FILE",
                        help="the token the replicas trust (their --router-token-file): sent "
                             "with every call so they accept its priority value")
    router.add_argument("--max-prompt-bytes", type=int, default=DEFAULT_MAX_PROMPT_BYTES,
                        metavar="N", help="a text prompt larger than this is refused")
    _add_responses_flags(router)
    router.add_argument("--program-ttl", type=float, default=SCHEDULER.program_ttl,
                        metavar="S", help="seconds an idle program lives before it expires")
    router.add_argument("--grace", type=float, default=5.0, metavar="S",
                        help="seconds calls in flight get to finish on shutdown")
    router.add_argument("--ready-timeout", type=float, default=120.0, metavar="S",
                        help="seconds to wait for a first replica before giving up (0: no "
                             "limit, e.g. while a cluster's engines load)")
    router.set_defaults(run=_router)


def _top_count(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 100:
        raise argparse.ArgumentTypeError(f"must be in [0, 100], got {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="agentix", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    gen = sub.add_parser("generate", formatter_class=_HelpFormatter,
                         help="answer chat prompts with the offline engine")
    gen.add_argument("--model", help="HF model directory (default: SmolLM2-135M-Instruct)")
    gen.add_argument("--prompt", action="append",
                     help="a user message (repeatable; default: four sample questions)")
    gen.add_argument("--max-tokens", type=int, default=96, help="tokens per answer at most")
    gen.add_argument("--temperature", type=float, default=0.0, help="0: greedy")
    gen.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling")
    gen.add_argument("--seed", type=int, help="sampling seed (default: none)")
    gen.add_argument("--dtype", choices=DTYPES, default="float32", help="weights and KV")
    gen.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    gen.add_argument("--policy", choices=list(POLICIES), default=DEFAULT_POLICY,
                     help="scheduling policy")
    gen.set_defaults(run=_generate)
    _add_serve_parser(sub)
    _add_router_parser(sub)
    top = sub.add_parser("top", formatter_class=_HelpFormatter,
                         help="a live view of one server: load, KV, queues, counters, programs")
    top.add_argument("address", help="the server's gRPC address, HOST:PORT")
    top.add_argument("--token", help="bearer token, with auth on: your own programs only "
                                     "(default: none)")
    top.add_argument("--interval", type=positive_float, default=1.0, metavar="S",
                     help="seconds between refreshes")
    top.add_argument("--top", type=_top_count, default=10, metavar="N",
                     help="programs listed, most service first (0..100)")
    top.add_argument("--once", action="store_true", help="print one frame and exit")
    top.set_defaults(run=_top)
    demo = sub.add_parser("demo", formatter_class=_HelpFormatter,
                          help="serve SmolLM2 (the engine's defaults) and run three agent "
                               "programs")
    demo.add_argument("--model", help="HF model directory (default: SmolLM2-135M-Instruct)")
    demo.add_argument("--dtype", choices=DTYPES, default="float32", help="weights and KV")
    demo.set_defaults(run=_demo)
    bench = sub.add_parser("bench", add_help=False,
                           help="benchmarks: 'agentix bench sim --help' (see bench/cli.py)")
    bench.add_argument("bench_args", nargs=argparse.REMAINDER)
    bench.set_defaults(run=_bench)
    return parser


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if args.command == "bench":  # pass everything through, options before "sim" too
        args.bench_args = extra + args.bench_args
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        args.run(args)
    except UsageError as exc:
        parser.exit(2, f"agentix {args.command}: error: {exc}\n")


if __name__ == "__main__":
    main()
