"""`agentix top`: one frame of a live server's EngineStats, rates and queue levels, and an
unreachable server as one line, status 1."""

from __future__ import annotations

import socket
import subprocess
import sys

from grpc_helpers import start

from server import cli
from server.client import AgentixClient
from server.top import COUNTERS, render


def test_top_once_prints_the_servers_stats(tiny_llama_dir, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    server = start(tiny_llama_dir)
    try:
        with AgentixClient(server.address) as client:
            prog = client.start_program(tenant="team-top")
            prog.generate([1, 2, 3], max_tokens=5, ignore_eos=True)
            cli.main(["top", server.address, "--once", "--top", "5"])
            stats = client.engine_stats(top_programs=5)
            prog.end()
    finally:
        server.stop(grace=0)
    lines = capsys.readouterr().out.splitlines()

    def row(label: str) -> list[str]:
        found = [line.split() for line in lines if line.strip().startswith(label)]
        assert len(found) == 1, (label, lines)
        return found[0]

    assert stats["generation_tokens"] >= 5 and stats["programs_active"] >= 1
    for label, key in COUNTERS:
        assert row(label)[-2:] == [str(stats[key]), "-"], label
    assert row("calls") == ["calls", str(stats["calls_running"]), "running",
                            str(stats["calls_waiting"]), "waiting",
                            str(stats["calls_swapped"]), "swapped"]
    assert row("programs active")[-1] == str(stats["programs_active"])
    assert row("KV blocks") == ["KV", "blocks", str(stats["kv_blocks_free"]), "free",
                                str(stats["kv_blocks_cached"]), "cached",
                                str(stats["kv_blocks_used"]), "used", "of",
                                str(stats["kv_blocks_total"])]
    assert row("queue depths")[2:] == [f"L{i}:{d}" for i, d in enumerate(stats["queue_depths"])]
    program = next(p for p in stats["top_programs"] if p["program_id"] == prog.program_id)
    assert row(prog.program_id) == [
        prog.program_id, "team-top", program["state"], "-", f"0/{program['num_calls']}",
        f"{program['wait']:.2f}", f"{program['service']:.2f}", f"{program['swap_time']:.2f}",
        f"{program['external_time']:.2f}", str(program["generated_tokens"])]


def test_top_shows_rates_and_the_queue_levels_of_active_calls():
    from rich.console import Console

    stats = {key: 0 for _, key in COUNTERS} | dict(
        calls_running=1, calls_waiting=1, calls_swapped=0, programs_active=1, kv_blocks_free=1,
        kv_blocks_cached=0, kv_blocks_used=2, kv_blocks_total=3, host_blocks_used=0,
        host_blocks_total=0, queue_depths=[1, 0, 1], running_tokens=4, waiting_tokens=5,
        top_programs=[dict(program_id="p1", tenant="t", state="active", num_calls=3,
                           active_calls=[{"queue": 2}, {"queue": 0}], wait=1.0, service=2.0,
                           swap_time=0.0, external_time=0.5, generated_tokens=7)])
    later = stats | {"generation_tokens": 50, "steps": 10}
    console = Console(width=200, record=True)
    console.print(render("host:1", later, stats, 2.0))
    text = console.export_text()
    assert "generation tokens" in text and "25.0" in text and "5.0" in text
    assert [line.split()[3:5] for line in text.splitlines() if "p1" in line] == [["0,2", "2/3"]]


def test_top_of_an_unreachable_server_is_one_line_status_1():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again: nothing listens there
    done = subprocess.run([sys.executable, "-m", "server.cli", "top", f"127.0.0.1:{port}",
                           "--once"], capture_output=True, text=True, timeout=30)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith(f"agentix top: 127.0.0.1:{port}: UNAVAILABLE")
    assert done.stderr.count("\n") == 1
