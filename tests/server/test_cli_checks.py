"""`agentix serve` fails fast: every bad argument is one line on stderr, status 2, before the
model loads; `--help` lists defaults and choices; `--set` reaches EngineConfig (a second
signal: tests/server/test_cli_signals.py; `agentix top`: tests/server/test_cli_top.py).

"Before the model loads" is shown twice. The model directories are poisoned (a valid
config.json, garbage weights): had the CLI loaded the model, it would have failed otherwise.
And representative failures, each in a process of its own, are timed against `floor`, what
`import server.app` (torch, grpc) alone costs (the others run in this process, by
`cli.main`, so the file stays fast). Measured on a 2-core CPU box: floor 1.3 s; a check that fails after that import 1.35 s;
the tiny model served and ready 2.8 s (SmolLM2-135M 5.1 s). So a failure must come within
LOAD_FACTOR x floor, and the checks made before torch is imported (the model path) within
half the floor (they take 0.05 s)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time

import pytest

from engine import EngineConfig, LLMEngine
from engine.config import DTYPES
from scheduler.policies import POLICIES
from server import cli
from server.cli_checks import engine_config, replicas_setup, router_setup, serve_setup
from server.response_store import ResponseLimits

# The poisoned weights prove no failure loads the model (a load would fail differently);
# the time bound only adds that a failure costs about an import, with room for a busy CPU.
LOAD_FACTOR = 2.5


@pytest.fixture(scope="module")
def floor() -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import server.app"], check=True)
    return time.perf_counter() - started


@pytest.fixture(scope="module")
def poisoned_dir(tiny_llama_dir, tmp_path_factory) -> str:
    """The tiny model's config and tokenizer with weights that cannot be loaded."""
    path = tmp_path_factory.mktemp("poisoned")
    shutil.copytree(tiny_llama_dir, path, dirs_exist_ok=True)
    (path / "model.safetensors").write_bytes(b"\xff" * 4096)
    with pytest.raises(Exception):  # the poison works: loading fails
        LLMEngine(EngineConfig(model=str(path), num_kv_blocks=8))
    return str(path)


def fail(*args: str) -> tuple[str, float]:
    """`agentix serve ARGS`'s stderr and seconds, asserting status 2, one line, no traceback."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "server.cli", "serve", *args],
                          capture_output=True, text=True, timeout=60)
    seconds = time.perf_counter() - started
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("agentix serve: error: ") and done.stdout == ""
    return done.stderr, seconds


def refused(capsys, *args: str) -> str:
    """`agentix serve ARGS` run in this process: its one line of stderr, asserting status 2
    (the checks' message; the poisoned weights make a load fail otherwise)."""
    with pytest.raises(SystemExit) as info:
        cli.main(["serve", *args])
    err = capsys.readouterr().err
    assert info.value.code == 2 and err.count("\n") == 1, err
    assert err.startswith("agentix serve: error: ")
    return err


def test_a_missing_model_path_fails_before_torch_is_imported(floor, tmp_path):
    message, seconds = fail("--model", str(tmp_path / "nope"))
    assert f"model: {tmp_path / 'nope'} does not exist" in message
    assert seconds < floor / 2


def test_a_model_path_that_is_a_file_fails_before_torch_is_imported(floor, poisoned_dir):
    message, seconds = fail("--model", f"{poisoned_dir}/config.json")
    assert "config.json is a file, not a model directory" in message
    assert seconds < floor / 2


def test_a_directory_without_config_json_fails_fast(floor, tmp_path):
    message, seconds = fail("--model", str(tmp_path), "--port", "0")
    assert f"model: {tmp_path} has no config.json" in message
    assert seconds < LOAD_FACTOR * floor


def test_a_taken_port_fails_before_the_model_loads(poisoned_dir, capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        for flags, flag in ((["--port", port], "--port"),
                            (["--port", "0", "--http-port", port], "--http-port"),
                            (["--port", "0", "--metrics-port", port], "--metrics-port")):
            message = refused(capsys, "--model", poisoned_dir, *flags)
            assert f"{flag}: cannot listen on 127.0.0.1:{port}: Address already in use" \
                in message


@pytest.mark.parametrize("flags, expected", [
    (["--policy", "nope"], "argument --policy: invalid choice: 'nope'"),
    (["--max-waiting", "0"], "max_waiting: must be positive, got 0"),
    (["--max-waiting", "-3"], "max_waiting: must be positive, got -3"),
    (["--set", "no_such_field=1"], "--set no_such_field: not a field of EngineConfig"),
    (["--set", "block_size=big"], "--set block_size='big': expected int"),
    (["--set", "block_size"], "argument --set: expected FIELD=VALUE, got 'block_size'"),
    (["--set", "max_num_seqs=4"], "--set max_num_seqs: it has a flag of its own"),
    (["--num-kv-blocks", "1"], "engine config: num_kv_blocks must be at least 2, got 1"),
    (["--preemption-mode", "swap"], "engine config: preemption_mode='swap' needs "
                                    "num_host_blocks > 0"),
    (["--device", "tpu"], "engine config: device must be cpu, cuda or cuda:N, got 'tpu'"),
    (["--device", "mps"], "engine config: device must be cpu, cuda or cuda:N, got 'mps'"),
    (["--set", "block_size=12"], "engine config: block_size must be a power of two, got 12"),
    (["--tensor-parallel-size", "3"], "tensor_parallel_size 3 does not divide the model's "
                                      "num_attention_heads 4"),
    (["--tensor-parallel-size", "0"], "argument --tensor-parallel-size: must be >= 1, got 0"),
    (["--ttft-slo-tokens", "-1"], "argument --ttft-slo-tokens: must be >= 0, got -1"),
    (["--ttft-slo-tokens", "20000000"], "engine config: ttft_slo_tokens must be an int in "
                                        "[1, 10000000] or None, got 20000000"),
    (["--set", "ttft_slo_tokens=5"], "--set ttft_slo_tokens: it has a flag of its own"),
    (["--device", "cuda", "--tensor-parallel-size", "2"], "--device: cuda with "
                                                          "--tensor-parallel-size 2 needs"),
    (["--reasoning-parser", "qwen"], "argument --reasoning-parser: invalid choice: 'qwen'"),
    (["--reasoning-parser", "qwen3"], "--reasoning-parser: reasoning parser 'qwen3' needs "
                                      "'<think>' as one token, and the model's vocabulary has "
                                      "no such token"),
])
def test_bad_arguments_fail_before_the_model_loads(poisoned_dir, flags, expected, capsys):
    assert expected in refused(capsys, "--model", poisoned_dir, "--port", "0", *flags)


def test_a_bad_argument_costs_about_an_import(floor, poisoned_dir):
    """One refusal that reads the model's config, timed in a process of its own."""
    message, seconds = fail("--model", poisoned_dir, "--port", "0",
                            "--tensor-parallel-size", "3")
    assert "tensor_parallel_size 3 does not divide" in message
    assert seconds < LOAD_FACTOR * floor


def test_no_grpc_without_http_fails_fast(poisoned_dir, capsys):
    message = refused(capsys, "--model", poisoned_dir, "--no-grpc")
    assert "--no-grpc: an HTTP-only server needs --http-port" in message


def test_infer_programs_without_http_fails_fast(poisoned_dir, capsys):
    message = refused(capsys, "--model", poisoned_dir, "--port", "0", "--infer-programs")
    assert message.endswith("--infer-programs: it infers the programs of the HTTP door's "
                            "chat requests, so it needs --http-port\n")


def test_help_lists_every_default_and_the_choices(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["serve", "--help"])
    assert info.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "--policy {" + ",".join(POLICIES) + "}" in text
    for shown in ("{float32,float16,bfloat16,float64}", "{lru,program}",
                  "{recompute,swap,keep,auto}", "(default: gittins)",
                  "(default: 50051)", "(default: 1024)", "(default: 5.0)", "(default: cpu)",
                  "(default: 64)", "(default: 600.0)", "default: off", "--no-grpc",
                  "--http-port", "--metrics-port", "--served-model-name", "--set FIELD=VALUE"):
        assert shown in text
    parser = cli.build_parser()
    serve = parser._subparsers._group_actions[0].choices["serve"]
    for action in serve._actions:
        if action.help != "show this help message and exit":
            assert action.default is not None or "default" in action.help, action.dest


def test_the_parsers_copies_of_engine_defaults_match_engine_config():
    assert cli.DTYPES == DTYPES
    defaults = EngineConfig().as_flat()
    args = cli.build_parser().parse_args(["serve"])
    for field in ("dtype", "device", "kv_cache_memory_gb", "num_kv_blocks", "num_host_blocks",
                  "max_num_seqs", "multistep", "program_ttl", "kv_memory"):
        assert getattr(args, field) == defaults[field], field


def test_set_and_the_engine_flags_reach_engine_config(tiny_llama_dir):
    args = cli.build_parser().parse_args([
        "serve", "--model", tiny_llama_dir, "--port", "0", "--http-port", "0",
        "--served-model-name", "tiny", "--metrics-tenant-label", "--max-num-seqs", "3",
        "--multistep", "2", "--program-ttl", "5", "--kv-cache-memory-gb", "0.5",
        "--num-kv-blocks", "40", "--num-host-blocks", "8", "--preemption-mode", "swap",
        "--set", "block_size=8", "--set", "starvation_beta=None", "--set", "quantum_base=2",
        "--set", "service_mode=tokens", "--set", "enable_chunked_prefill=False"])
    config, options = serve_setup(args)
    expected = dict(model=tiny_llama_dir, max_num_seqs=3, multistep=2, program_ttl=5.0,
                    kv_cache_memory_gb=0.5, num_kv_blocks=40, num_host_blocks=8,
                    preemption_mode="swap", block_size=8, starvation_beta=None,
                    quantum_base=2.0, service_mode="tokens", enable_chunked_prefill=False,
                    policy="gittins", enable_prefix_caching=True)
    assert {k: config.as_flat()[k] for k in expected} == expected
    assert type(config.scheduler.quantum_base) is float
    assert (options.port, options.http_port, options.served_model_name,
            options.metrics_tenant_label) == (0, 0, "tiny", True)


def test_serve_sets_a_first_token_deadline_in_tokens_by_default(tiny_llama_dir):
    def deadline(*flags: str) -> tuple:
        args = cli.build_parser().parse_args(["serve", "--model", tiny_llama_dir, *flags])
        scheduler = engine_config(args, tiny_llama_dir).scheduler
        return scheduler.ttft_slo_tokens, scheduler.ttft_slo_seconds

    assert deadline() == (EngineConfig().scheduler.ttft_slo_tokens, None) == (2048, None)
    assert deadline("--ttft-slo-tokens", "0") == (None, None)
    assert deadline("--ttft-slo-tokens", "512") == (512, None)
    assert deadline("--set", "ttft_slo_seconds=0.5") == (2048, 0.5)  # seconds win (scheduler)


def test_a_reasoning_parser_whose_markers_the_tokenizer_has_reaches_the_options(
        tiny_llama_dir, tmp_path):
    from transformers import AutoTokenizer

    shutil.copytree(tiny_llama_dir, tmp_path, dirs_exist_ok=True)
    tokenizer = AutoTokenizer.from_pretrained(tiny_llama_dir)
    tokenizer.add_tokens(["<think>", "</think>"])
    tokenizer.save_pretrained(tmp_path)
    for name in ("qwen3", "deepseek_r1"):
        args = cli.build_parser().parse_args(["serve", "--model", str(tmp_path), "--port", "0",
                                              "--reasoning-parser", name])
        assert serve_setup(args)[1].reasoning_parser == name
        args = cli.build_parser().parse_args(["serve", "--model", str(tmp_path), "--port", "0",
                                              "--replicas", "2", "--reasoning-parser", name])
        local, router = replicas_setup(args, cli._child_serve_args)
        assert router.reasoning_parser == name  # the router's own door
        assert local.serve_args[local.serve_args.index("--reasoning-parser") + 1] == name
        args = cli.build_parser().parse_args(["router", "--replica", "127.0.0.1:1", "--port",
                                              "0", "--model", str(tmp_path),
                                              "--reasoning-parser", name])
        assert router_setup(args).reasoning_parser == name
    args = cli.build_parser().parse_args(["serve", "--model", str(tmp_path), "--port", "0"])
    assert serve_setup(args)[1].reasoning_parser is None


def test_no_grpc_serves_http_only(tiny_llama_dir):
    args = cli.build_parser().parse_args(["serve", "--model", tiny_llama_dir, "--no-grpc",
                                          "--http-port", "0"])
    _, options = serve_setup(args)
    assert (options.port, options.http_port, options.infer_programs) == (None, 0, False)
    assert engine_config(args, tiny_llama_dir).model == tiny_llama_dir
    inferring = cli.build_parser().parse_args(["serve", "--model", tiny_llama_dir, "--no-grpc",
                                               "--http-port", "0", "--infer-programs"])
    assert serve_setup(inferring)[1].infer_programs


def test_the_responses_flags_reach_the_stored_responses_limits(tiny_llama_dir):
    """serve, router and serve --replicas (the router's door) alike; no --responses-ttl:
    the program TTL (ResponseLimits.ttl None)."""
    flags = ["--responses-per-tenant", "7", "--responses-max-bytes", "4096",
             "--responses-ttl", "30"]
    parse = cli.build_parser().parse_args
    serve = ["serve", "--model", tiny_llama_dir, "--port", "0"]
    assert serve_setup(parse(serve))[1].responses == ResponseLimits()
    assert ResponseLimits().ttl is None
    limits = ResponseLimits(7, 4096, 30.0)
    assert serve_setup(parse([*serve, *flags]))[1].responses == limits
    assert router_setup(parse(["router", "--replica", "127.0.0.1:1", "--port", "0",
                               *flags])).responses == limits
    assert replicas_setup(parse([*serve, "--replicas", "2", *flags]),
                          cli._child_serve_args)[1].responses == limits


@pytest.mark.parametrize("flags, expected", [
    (["--responses-per-tenant", "0"], "argument --responses-per-tenant: must be >= 1, got 0"),
    (["--responses-max-bytes", "-1"], "argument --responses-max-bytes: must be >= 1, got -1"),
    (["--responses-ttl", "0"], "argument --responses-ttl: must be > 0, got 0"),
])
def test_bad_responses_flags_are_refused_naming_them(flags, expected, capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["serve", *flags])
    assert info.value.code == 2
    assert capsys.readouterr().err == f"agentix serve: error: {expected}\n"
