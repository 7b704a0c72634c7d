"""`agentix serve --replicas N` and `agentix router` as processes: they serve on one
address (gRPC, and with --http-port the OpenAI door), and no replica process outlives the
parent (SIGTERM, or SIGKILL of the parent); the router is light: it imports no engine."""

from __future__ import annotations

import os
import json
import signal
import subprocess
import sys
import time
import urllib.request

import psutil
import pytest
from router_helpers import agentix, in_process_replicas, wait_until

from server.client import AgentixClient

TINY = ("--num-kv-blocks", "64", "--set", "block_size=8")


def read_until(process: subprocess.Popen, prefix: str, timeout: float = 60.0) -> list[str]:
    lines = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            raise AssertionError(f"exited ({process.wait()}): {process.stderr.read()}")
        lines.append(line.strip())
        if line.startswith(prefix):
            return lines
    raise AssertionError(f"no {prefix!r} line: {lines}")


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_the_router_loads_neither_torch_nor_the_engine_nor_its_server():
    """A router holds no model: `agentix router`'s checks and the router's package (its
    OpenAI door and metrics port aside, loaded when served) load no torch, no engine/ and
    not server.app."""
    code = ("import sys\n"
            "from server.cli import build_parser\n"
            "from server.cli_checks import router_setup\n"
            "router_setup(build_parser().parse_args(\n"
            "    ['router', '--replica', '127.0.0.1:1', '--port', '0']))\n"
            "import server.router.app\n"
            "print(sorted(name for name in sys.modules if name == 'server.app'\n"
            "             or name.split('.')[0] in ('torch', 'engine')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "[]\n"


def serve_replicas(model_dir: str, *flags: str
                   ) -> tuple[subprocess.Popen, list[str], list[int]]:
    """The process, its addresses (gRPC, then HTTP with --http-port, then metrics with
    --metrics-port), its children."""
    process = agentix("serve", "--replicas", "2", "--model", model_dir, "--port", "0",
                      "--placement", "round_robin", "--grace", "1", *TINY, *flags)
    extra = [label for label, flag in (("http", "--http-port"), ("metrics", "--metrics-port"))
             if flag in flags]
    lines = read_until(process, f"{(['agentix'] + extra)[-1]} serving on ")
    labels = ["replica 0", "replica 1", "agentix"] + extra
    assert [line.split(" serving on ")[0] for line in lines] == labels
    children = [c.pid for c in psutil.Process(process.pid).children(recursive=True)]
    assert len(children) == 2
    return process, [line.rsplit(" ", 1)[1] for line in lines[2:]], children


def test_serve_replicas_serves_and_leaves_no_child_after_sigterm(tiny_llama_dir):
    # --infer-programs is the router door's: a child given it would refuse to start (it
    # serves no HTTP).
    process, (address, http_address, metrics_address), children = serve_replicas(
        tiny_llama_dir, "--http-port", "0", "--served-model-name", "tiny", "--metrics-port", "0",
        "--infer-programs")
    try:
        with AgentixClient(address) as client, client.program() as prog:
            engines = []
            for _ in range(2):
                assert len(prog.generate("w5 w6", max_tokens=3, ignore_eos=True).token_ids) == 3
                engines.append(prog.info()["engine"])
            assert engines == [0, 1]
        request = urllib.request.Request(
            f"http://{http_address}/v1/completions",
            headers={"X-Program-Id": "p1", "Content-Type": "application/json"},
            data=json.dumps({"model": "tiny", "prompt": "w5 w6", "max_tokens": 3,
                             "ignore_eos": True}).encode())
        with urllib.request.urlopen(request, timeout=30) as response:
            assert json.loads(response.read())["usage"]["completion_tokens"] == 3
        with urllib.request.urlopen(f"http://{metrics_address}/metrics", timeout=10) as response:
            placed = [line for line in response.read().decode().splitlines()
                      if line.startswith("agentix_router_replica_placements_total{")]
        assert sorted(float(line.rsplit(" ", 1)[1]) for line in placed) == [1.0, 2.0]
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0
        assert "agentix: stopped" in process.stderr.read()
        assert all(gone(pid) for pid in children)
    finally:
        process.kill()
        for pid in children:
            if not gone(pid):
                os.kill(pid, signal.SIGKILL)


def test_replicas_die_with_a_killed_parent(tiny_llama_dir):
    process, _, children = serve_replicas(tiny_llama_dir)
    try:
        process.kill()  # SIGKILL: no cleanup code runs in the parent
        process.wait(10)
        wait_until(lambda: all(gone(pid) for pid in children), timeout=10,
                   what="the replicas to die with their parent")
    finally:
        for pid in children:
            if not gone(pid):
                os.kill(pid, signal.SIGKILL)


def test_router_command_over_running_replicas(tiny_llama_dir):
    replicas = in_process_replicas(tiny_llama_dir)
    token_file = None
    try:
        import tempfile

        with tempfile.NamedTemporaryFile("w", suffix=".token", delete=False) as out:
            out.write("router-secret\n")
            token_file = out.name
        process = agentix("router", *(arg for r in replicas for arg in ("--replica", r.address)),
                          "--port", "0", "--placement", "pinned", "--model", tiny_llama_dir,
                          "--router-token-file", token_file, "--metrics-port", "0")
        try:
            line, metrics_line = read_until(process, "metrics serving on ")
            assert line.startswith("agentix router serving on ")
            with AgentixClient(line.rsplit(" ", 1)[1]) as client, client.program() as prog:
                for _ in range(2):
                    prog.generate("w5 w6 w7", max_tokens=2)
                info = prog.info()
                assert info["num_calls"] == 2 and info["engine"] in (0, 1)
                on_home = replicas[info["engine"]].engine_loop.call(
                    lambda e: e.get_program(prog.program_id).service)
                assert on_home == pytest.approx(info["service"])  # the router's value landed
            metrics_url = f"http://{metrics_line.rsplit(' ', 1)[1]}/metrics"
            with urllib.request.urlopen(metrics_url, timeout=10) as response:
                text = response.read().decode()
            placed = [line for line in text.splitlines()
                      if line.startswith("agentix_router_replica_placements_total{")]
            assert sorted(float(line.rsplit(" ", 1)[1]) for line in placed) == [0.0, 2.0]
            process.send_signal(signal.SIGTERM)
            assert process.wait(30) == 0
        finally:
            process.kill()
    finally:
        if token_file is not None:
            os.unlink(token_file)
        for server in replicas:
            server.stop(grace=0)
