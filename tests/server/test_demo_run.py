"""The demo's three agent programs run end to end against a server (tiny model: the answers
are noise, the plumbing is real) and leave nothing behind."""

from __future__ import annotations

from server.demo import AGENTS, run_agents


def test_the_three_agents_run_concurrently_and_leave_no_state(grpc_server, clean, capsys):
    run_agents(grpc_server.address)
    out = capsys.readouterr().out
    for name in AGENTS:
        assert f"=== {name} program" in out
    assert out.count("process table: calls=") == 3
    assert "calls=5" in out  # fan-out: 4 branches and the join
    assert "calls=3" in out  # chat: three turns
    assert grpc_server.engine_loop.call(lambda e: len(e.scheduler.table)) == 0
