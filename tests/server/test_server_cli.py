"""`agentix serve` as a process: prints its addresses once SERVING, serves, reports its drain
and exits cleanly on SIGTERM; a malformed token file is a clear error. Also: the committed
stubs match the .proto. (The fast failures, --help and `agentix top`: test_cli_checks.py.)"""

from __future__ import annotations

import signal
import subprocess
import sys

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_helpers import collect, gen_request

from server import agentix_pb2_grpc
from server.cli import build_parser, main
from server.cli_checks import engine_config
from server.gen_stubs import stale_stubs


def serve(model_dir: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "server.cli", "serve", "--model", model_dir,
                             "--port", "0", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_serve_prints_address_serves_and_stops_on_sigterm(tiny_llama_dir, tmp_path):
    tokens = tmp_path / "tokens"
    tokens.write_text("# token tenant\ns3cret team-a\n")
    process = serve(tiny_llama_dir, "--policy", "atlas", "--auth-token-file", str(tokens),
                    "--max-waiting", "8", "--metrics-port", "0")
    try:
        line = process.stdout.readline()
        assert line.startswith("agentix serving on 127.0.0.1:"), process.stderr.read()
        address = line.split()[-1]
        assert process.stdout.readline().startswith("metrics serving on 127.0.0.1:")
        with grpc.insecure_channel(address) as channel:
            status = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
            assert status.status == health_pb2.HealthCheckResponse.SERVING
            stub = agentix_pb2_grpc.AgentixStub(channel)
            ids, _, final = collect(stub.Generate(
                gen_request([1, 5, 6], max_tokens=4, ignore_eos=True),
                metadata=[("authorization", "Bearer s3cret")]))
            assert len(ids) == 4 and final.finish_reason == "length"
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
        lines = process.stderr.read().splitlines()
        assert lines[-2:] == ["agentix: draining (grace 5 s); signal again to exit now",
                              "agentix: stopped"]
    finally:
        process.kill()
        process.wait()


def test_serve_rejects_a_malformed_token_file(tiny_llama_dir, tmp_path, capsys):
    tokens = tmp_path / "tokens"
    tokens.write_text("s3cret team-a\nlonely\n")
    with pytest.raises(SystemExit) as info:
        main(["serve", "--model", tiny_llama_dir, "--auth-token-file", str(tokens)])
    message = capsys.readouterr().err
    assert info.value.code == 2
    assert f"--auth-token-file: {tokens}:2: expected 'TOKEN TENANT'" in message
    assert "s3cret" not in message


def test_serve_turns_on_prefix_caching_and_program_memory_by_default(tiny_llama_dir):
    config = engine_config(build_parser().parse_args(["serve"]), tiny_llama_dir)
    scheduler = config.scheduler
    assert (config.enable_prefix_caching, scheduler.kv_memory, scheduler.preemption_mode,
            config.num_host_blocks) == (True, "program", "auto", 0)
    config = engine_config(build_parser().parse_args(
        ["serve", "--no-prefix-caching", "--kv-memory", "lru", "--num-host-blocks", "64",
         "--preemption-mode", "swap"]), tiny_llama_dir)
    scheduler = config.scheduler
    assert (config.enable_prefix_caching, scheduler.kv_memory, scheduler.preemption_mode,
            config.num_host_blocks) == (False, "lru", "swap", 64)


@pytest.mark.parametrize("flags, field", [(["--kv-memory", "mru"], "--kv-memory"),
                                          (["--preemption-mode", "keep", "--no-prefix-caching"],
                                           "enable_prefix_caching"),
                                          (["--num-host-blocks", "-1"], "num_host_blocks")])
def test_serve_rejects_bad_memory_flags_naming_the_field(tiny_llama_dir, flags, field, capsys):
    with pytest.raises(SystemExit) as info:
        main(["serve", "--model", tiny_llama_dir, "--port", "0", *flags])
    assert info.value.code == 2 and field in capsys.readouterr().err


def test_committed_stubs_match_the_proto():
    assert stale_stubs() == []
