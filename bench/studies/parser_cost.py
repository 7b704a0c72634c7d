"""What parsing tool calls costs a call: each parser of `server.tool_parsers` (and the forced
call's) on a typical output, whole (`parse`) and streamed token by token (`feed` per piece,
then `finish`), in microseconds per call.

    python -m bench.studies.parser_cost [--repeats 2000]

The output of each format holds some text and two calls of a weather tool (the forced one:
the JSON array a "required" choice constrains the output to); streamed, it arrives in
pieces of 4 characters, about a token's worth. Median of --repeats runs, one thread.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

from server.tool_parsers import make_tool_parser
from server.tool_parsers.base import ToolParser
from server.tool_parsers.forced import ForcedCallParser

CALLS = [{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}},
         {"name": "get_time", "arguments": {"zone": "Europe/Paris"}}]
TEXT = "Let me look that up for you. "
OUTPUTS: dict[str, tuple[Callable[[], ToolParser], str]] = {
    "hermes": (lambda: make_tool_parser("hermes"), TEXT + "".join(
        f"<tool_call>\n{json.dumps(c)}\n</tool_call>" for c in CALLS)),
    "llama3_json": (lambda: make_tool_parser("llama3_json"), "<|python_tag|>" + "; ".join(
        json.dumps({"name": c["name"], "parameters": c["arguments"]}) for c in CALLS)),
    "pythonic": (lambda: make_tool_parser("pythonic"), "[" + ", ".join(
        f"{c['name']}(" + ", ".join(f"{k}={v!r}" for k, v in c["arguments"].items()) + ")"
        for c in CALLS) + "]"),
    "forced (required)": (lambda: ForcedCallParser(None), json.dumps(
        [{"name": c["name"], "parameters": c["arguments"]} for c in CALLS])),
}
PIECE = 4  # characters per streamed piece


def whole(make: Callable[[], ToolParser], text: str) -> int:
    return len(make().parse(text).tool_calls)


def streamed(make: Callable[[], ToolParser], text: str) -> int:
    parser = make()
    fragments = []
    for i in range(0, len(text), PIECE):
        fragments += parser.feed(text[i:i + PIECE])
    fragments += parser.finish()
    return sum(1 for f in fragments if "tool_calls" in f and "id" in f["tool_calls"][0])


def median_us(fn: Callable[[], int], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e6


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2000)
    args = parser.parse_args(argv)
    print("| parser | output chars | calls found (whole / streamed) | parse us | streamed us |")
    print("| --- | --- | --- | --- | --- |")
    for name, (make, text) in OUTPUTS.items():
        found = (whole(make, text), streamed(make, text))
        print(f"| {name} | {len(text)} | {found[0]} / {found[1]} | "
              f"{median_us(lambda: whole(make, text), args.repeats):.1f} | "
              f"{median_us(lambda: streamed(make, text), args.repeats):.1f} |")


if __name__ == "__main__":
    main()
