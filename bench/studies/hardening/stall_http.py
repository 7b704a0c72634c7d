"""The HTTP attacks of bench.studies.hardening.stall, each run in its own spawned process against
the server's OpenAI door (the victim stays on gRPC). Answers are counted by HTTP status: 2xx
accepted, 4xx refused, others failed (by status; a connection error by its class; a connection the
server closed without an answer as "closed").

  http_huge_body      POST /v1/completions declaring a 50 MB body and sending it in 64 KB
                      pieces until the first byte of an answer (a 413 before the body is
                      read); `body_bytes_sent` sums what went out before each answer.
  http_slowloris      500 connections in all (split over the attackers), each sending a partial
                      request head, then one more header line every TRICKLE_S s, never the
                      end; one the server closes or answers is opened again. Accepted: the
                      connections still held when the phase ends (`held_at_end`).
  http_n16            streamed /v1/completions with n=16 and the largest max_tokens the context
                      allows (ignore_eos), each read to its end, back to back.
  http_program_ids    1-token chat completions, each with a new X-Program-Id, back to back on a
                      keep-alive connection (200, or 429 past the program caps). After the
                      phase the programs accepted are ended (`programs_ended`), so that they
                      crowd no later phase.
  http_sse_nonreader  the http_n16 request from a socket with a 4 KB receive buffer that reads
                      the answer's head and nothing more, held open until the phase ends (one
                      per attacker; http_n16 is its control).
"""

from __future__ import annotations

import http.client
import json
import os
import selectors
import socket
import time
from typing import Any, Callable

HTTP_PHASES = ("http_huge_body", "http_slowloris", "http_n16", "http_program_ids",
               "http_sse_nonreader")
HUGE_BODY_BYTES = 50 << 20
SEND_PIECE = 64 << 10
SLOWLORIS_CONNECTIONS = 500
PARTIAL_HEAD = b"POST /v1/completions HTTP/1.1\r\nHost: agentix\r\n"
TRICKLE_S = 5.0
NONREADER_BUFFER = 4096
CHOICES = 16
POLL_S = 0.5  # how often a blocked read looks at `stop`
CHAT = [{"role": "user", "content": "hello there"}]

Address = tuple[str, int]


class ClosedError(ConnectionError):
    """The server closed a connection without an answer."""


class Tally:
    """One attacker's counts: {accepted, refused: {status: n}, failed: {what: n}, requests, ...}
    (bench.studies.hardening.stall.merge_counts adds them up); `programs` the program ids
    accepted."""

    def __init__(self) -> None:
        self.counts: dict[str, Any] = {"accepted": 0, "refused": {}, "failed": {},
                                       "requests": 0}
        self.programs: list[str] = []

    def answer(self, status: int) -> None:
        if 200 <= status < 300:
            self.counts["accepted"] += 1
        else:
            self.add("refused" if 400 <= status < 500 else "failed", str(status))

    def add(self, bucket: str, what: str) -> None:
        self.counts[bucket][what] = self.counts[bucket].get(what, 0) + 1

    def bump(self, key: str, n: int = 1) -> None:
        self.counts[key] = self.counts.get(key, 0) + n


class HttpClient:
    """JSON POSTs on one keep-alive connection (opened again after an error, which is
    raised: OSError or http.client.HTTPException)."""

    def __init__(self, address: str, timeout: float = 60.0) -> None:
        self.connection = http.client.HTTPConnection(*parse_address(address), timeout=timeout)

    def post(self, path: str, body: bytes, headers: dict[str, str] | None = None) -> int:
        try:
            self.connection.request("POST", path, body, {"Content-Type": "application/json",
                                                         **(headers or {})})
            response = self.connection.getresponse()
            response.read()
            return response.status
        except (OSError, http.client.HTTPException):
            self.connection.close()
            raise

    def close(self) -> None:
        self.connection.close()


def parse_address(address: str) -> Address:
    host, port = address.rsplit(":", 1)
    return host.strip("[]"), int(port)


def request_head(path: str, length: int, headers: dict[str, str] | None = None) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: agentix", "Content-Type: application/json",
             f"Content-Length: {length}", *(f"{k}: {v}" for k, v in (headers or {}).items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def read_head(sock: socket.socket, stop: Any) -> int | None:
    """Read an answer's head byte by byte (nothing after it) and return its status; None if
    `stop` came first. ClosedError if the server closed without one."""
    sock.settimeout(POLL_S)
    head = b""
    while not head.endswith(b"\r\n\r\n"):
        try:
            byte = sock.recv(1)
        except TimeoutError:
            if stop.is_set():
                return None
            continue
        if not byte:
            raise ClosedError("closed without an answer")
        head += byte
    return int(head.split(b" ", 2)[1])


def failed(tally: Tally, error: Exception) -> None:
    tally.add("failed", "closed" if isinstance(error, ClosedError) else type(error).__name__)
    time.sleep(0.05)  # e.g. refused connections: do not spin


def n16_body(spec: dict[str, Any]) -> bytes:
    return json.dumps({"prompt": spec["prompt"], "n": CHOICES, "ignore_eos": True,
                       "max_tokens": spec["http_max_tokens"], "stream": True}).encode()


# ----- the attacks: each runs until `stop` ---------------------------------------------------

def huge_body(address: Address, spec: dict[str, Any], index: int, tally: Tally,
              stop: Any) -> None:
    body = b'{"prompt": "' + b"a" * (HUGE_BODY_BYTES - 14) + b'"}'
    head = request_head("/v1/completions", len(body))
    while not stop.is_set():
        tally.bump("requests")
        try:
            with socket.create_connection(address, timeout=30) as sock:
                sock.sendall(head)
                tally.bump("body_bytes_sent", send_until_answer(sock, body, stop))
                status = read_head(sock, stop)
        except OSError as error:
            failed(tally, error)
            continue
        if status is None:
            tally.bump("cancelled_at_end")
        else:
            tally.answer(status)


def send_until_answer(sock: socket.socket, body: bytes, stop: Any) -> int:
    """Send `body` until the server answers (or closes), all is sent, or `stop`; the bytes
    sent."""
    view, sent = memoryview(body), 0
    selector = selectors.DefaultSelector()
    selector.register(sock, selectors.EVENT_READ | selectors.EVENT_WRITE)
    with selector:
        while sent < len(body) and not stop.is_set():
            events = [mask for _, mask in selector.select(POLL_S)]
            if any(mask & selectors.EVENT_READ for mask in events):
                break
            if events:
                try:
                    sent += sock.send(view[sent:sent + SEND_PIECE])
                except (BrokenPipeError, ConnectionResetError):
                    break
    return sent


def slowloris(address: Address, spec: dict[str, Any], index: int, tally: Tally,
              stop: Any) -> None:
    share, extra = divmod(SLOWLORIS_CONNECTIONS, spec["attackers"])
    selector = selectors.DefaultSelector()

    def open_one() -> None:
        try:
            sock = socket.create_connection(address, timeout=10)
            sock.sendall(PARTIAL_HEAD)
        except OSError as error:
            failed(tally, error)
            return
        tally.bump("requests")
        selector.register(sock, selectors.EVENT_READ)

    def drop(sock: socket.socket) -> None:  # the server answered or closed: open another
        selector.unregister(sock)
        try:
            data = sock.recv(4096)
        except OSError:
            data = b""
        sock.close()
        if data.startswith(b"HTTP/"):
            tally.answer(int(data.split(b" ", 2)[1]))
        else:
            tally.add("failed", "closed")
        open_one()

    for _ in range(share + (index < extra)):
        open_one()
    next_trickle = time.monotonic() + TRICKLE_S
    while not stop.is_set():
        for key, _ in selector.select(POLL_S):
            drop(key.fileobj)
        if time.monotonic() >= next_trickle:
            next_trickle += TRICKLE_S
            for key in list(selector.get_map().values()):
                try:
                    key.fileobj.sendall(b"X-Still-Coming: 1\r\n")
                except OSError:
                    drop(key.fileobj)
    held = list(selector.get_map().values())
    tally.counts["held_at_end"] = len(held)
    tally.counts["accepted"] += len(held)
    for key in held:
        key.fileobj.close()
    selector.close()


def n16(address: Address, spec: dict[str, Any], index: int, tally: Tally, stop: Any) -> None:
    body = n16_body(spec)
    message = request_head("/v1/completions", len(body), {"Connection": "close"}) + body
    while not stop.is_set():
        tally.bump("requests")
        try:
            with socket.create_connection(address, timeout=60) as sock:
                sock.sendall(message)
                status = read_head(sock, stop)
                ended = status is not None and read_to_end(sock, stop)
        except OSError as error:
            failed(tally, error)
            continue
        if status is not None:
            tally.answer(status)
        if not ended:
            tally.bump("cancelled_at_end")


def read_to_end(sock: socket.socket, stop: Any) -> bool:
    """Read until the server closes (True) or `stop` (False)."""
    sock.settimeout(POLL_S)
    while not stop.is_set():
        try:
            if not sock.recv(1 << 16):
                return True
        except TimeoutError:
            pass
    return False


def program_ids(address: Address, spec: dict[str, Any], index: int, tally: Tally,
                stop: Any) -> None:
    client = HttpClient(f"{address[0]}:{address[1]}")
    body = json.dumps({"messages": CHAT, "max_tokens": 1}).encode()
    while not stop.is_set():
        program = f"http-flood-{os.getpid()}-{tally.counts['requests']}"
        tally.bump("requests")
        try:
            status = client.post("/v1/chat/completions", body, {"X-Program-Id": program})
        except (OSError, http.client.HTTPException) as error:
            failed(tally, error)
            continue
        tally.answer(status)
        if status == 200:
            tally.programs.append(program)
    client.close()


def sse_nonreader(address: Address, spec: dict[str, Any], index: int, tally: Tally,
                  stop: Any) -> None:
    body = n16_body(spec)
    tally.bump("requests")
    try:
        with socket.socket(socket.AF_INET6 if ":" in address[0] else socket.AF_INET) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, NONREADER_BUFFER)
            sock.settimeout(60)
            sock.connect(address)
            sock.sendall(request_head("/v1/completions", len(body)) + body)
            status = read_head(sock, stop)
            if status is not None:
                tally.answer(status)
            stop.wait()
    except OSError as error:
        failed(tally, error)


ATTACKS: dict[str, Callable[[Address, dict[str, Any], int, Tally, Any], None]] = {
    "http_huge_body": huge_body, "http_slowloris": slowloris, "http_n16": n16,
    "http_program_ids": program_ids, "http_sse_nonreader": sse_nonreader}


def end_programs(address: str, programs: list[str]) -> int:
    """End `programs` (POST /v1/programs/{id}:end); how many were ended."""
    client = HttpClient(address)
    ended = 0
    for program in programs:
        try:
            ended += client.post(f"/v1/programs/{program}:end", b"") == 200
        except (OSError, http.client.HTTPException):
            pass
    client.close()
    return ended


def http_attacker(kind: str, address: str, spec: dict[str, Any], index: int, ready: Any,
                  go: Any, stop: Any, results: Any) -> None:
    """bench.studies.hardening.stall.attacker for an HTTP phase (`address`: the HTTP door's): run
    the attack from `go` until `stop`, then put its counts on `results`."""
    tally = Tally()
    ready.set()
    go.wait()
    started = time.monotonic()
    ATTACKS[kind](parse_address(address), spec, index, tally, stop)
    tally.counts["seconds"] = time.monotonic() - started
    if tally.programs:
        tally.counts["programs_ended"] = end_programs(address, tally.programs)
    results.put(tally.counts)


def phase_info(kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    """What an HTTP phase's report states about its requests."""
    if kind == "http_huge_body":
        return {"body_bytes": HUGE_BODY_BYTES}
    if kind == "http_slowloris":
        return {"connections": SLOWLORIS_CONNECTIONS, "trickle_s": TRICKLE_S}
    if kind == "http_n16":
        return {"n": CHOICES, "max_tokens": spec["http_max_tokens"]}
    if kind == "http_sse_nonreader":
        return {"n": CHOICES, "max_tokens": spec["http_max_tokens"],
                "receive_buffer": NONREADER_BUFFER}
    return {}
