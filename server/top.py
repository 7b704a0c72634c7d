"""`agentix top ADDRESS`: a live terminal view of one server (rich). Each frame shows the
server's EngineStats: calls and programs, KV and host blocks, queue depths per level, the
counters with their rates since the previous frame, and the programs with the most service
(queue levels of their active calls, '-' when idle). `--once` prints one frame and exits."""

from __future__ import annotations

import time
from typing import Any

from rich import box
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table

from server.client import AgentixClient, AgentixError

RPC_TIMEOUT = 5.0  # seconds: an unreachable server fails within this
COUNTERS = (("generation tokens", "generation_tokens"),
            ("prompt tokens computed", "prompt_tokens_computed"),
            ("prompt tokens cached", "prompt_tokens_cached"),
            ("steps", "steps"),
            ("preemptions recompute", "preemptions_recompute"),
            ("preemptions swap", "preemptions_swap"),
            ("preemptions keep", "preemptions_keep"),
            ("swap-out bytes", "swap_out_bytes"),
            ("swap-in bytes", "swap_in_bytes"),
            ("promotions", "promotions"))


class TopError(Exception):
    """The server could not be reached or refused EngineStats (a one-line message)."""


def run(address: str, token: str | None = None, interval: float = 1.0, top: int = 10,
        once: bool = False, console: Console | None = None) -> None:
    """Show `address`'s stats every `interval` seconds until Ctrl-C (one frame if `once`);
    TopError when a refresh fails."""
    console = console or Console()
    try:
        with AgentixClient(address, token=token, timeout=RPC_TIMEOUT) as client:
            stats, at = _fetch(client, address, top)
            if once:
                console.print(render(address, stats))
                return
            with Live(render(address, stats), console=console, auto_refresh=False) as live:
                while True:
                    time.sleep(interval)
                    previous, before = stats, at
                    stats, at = _fetch(client, address, top)
                    live.update(render(address, stats, previous, at - before), refresh=True)
    except KeyboardInterrupt:  # Ctrl-C ends the view
        pass


def _fetch(client: AgentixClient, address: str, top: int) -> tuple[dict[str, Any], float]:
    try:
        return client.engine_stats(top_programs=top), time.monotonic()
    except AgentixError as exc:
        raise TopError(f"{address}: {' '.join(str(exc).split())}") from None


def render(address: str, stats: dict[str, Any], previous: dict[str, Any] | None = None,
           seconds: float | None = None) -> Group:
    """One frame; the rates are the counters' change since `previous`, `seconds` earlier
    ('-' without it)."""
    return Group(f"agentix top {address}  {time.strftime('%H:%M:%S')}", _load(stats),
                 _counters(stats, previous, seconds), _programs(stats["top_programs"]))


def _load(s: dict[str, Any]) -> Table:
    table = Table("load", "", box=box.SIMPLE_HEAD, show_header=False)
    depths = "  ".join(f"L{level}:{depth}" for level, depth in enumerate(s["queue_depths"]))
    for label, value in (
            ("calls", f"{s['calls_running']} running  {s['calls_waiting']} waiting  "
                      f"{s['calls_swapped']} swapped"),
            ("programs active", str(s["programs_active"])),
            ("KV blocks", f"{s['kv_blocks_free']} free  {s['kv_blocks_cached']} cached  "
                          f"{s['kv_blocks_used']} used  of {s['kv_blocks_total']}"),
            ("host blocks", f"{s['host_blocks_used']} used  of {s['host_blocks_total']}"),
            ("queue depths", depths or "-"),
            ("tokens", f"{s['running_tokens']} running  {s['waiting_tokens']} waiting")):
        table.add_row(label, value)
    return table


def _counters(stats: dict[str, Any], previous: dict[str, Any] | None,
              seconds: float | None) -> Table:
    table = _table("counter", "total", "per s")
    for label, key in COUNTERS:
        rate = ("-" if previous is None or not seconds
                else f"{(stats[key] - previous[key]) / seconds:.1f}")
        table.add_row(label, str(stats[key]), rate)
    return table


def _programs(programs: list[dict[str, Any]]) -> Table:
    table = _table("program", "tenant", "state", "queue", "calls", "wait s", "service",
                   "swap s", "external s", "tokens", text_columns=3,
                   title="programs with the most service")
    for p in programs:
        levels = sorted({call["queue"] for call in p["active_calls"]})
        table.add_row(p["program_id"], p["tenant"], p["state"],
                      ",".join(map(str, levels)) or "-",
                      f"{len(p['active_calls'])}/{p['num_calls']}", f"{p['wait']:.2f}",
                      f"{p['service']:.2f}", f"{p['swap_time']:.2f}", f"{p['external_time']:.2f}",
                      str(p["generated_tokens"]))
    return table


def _table(*headers: str, text_columns: int = 1, title: str | None = None) -> Table:
    """A table whose columns after the first `text_columns` are numbers (right-aligned)."""
    table = Table(box=box.SIMPLE_HEAD, title=title)
    for i, header in enumerate(headers):
        table.add_column(header, justify="left" if i < text_columns else "right")
    return table
