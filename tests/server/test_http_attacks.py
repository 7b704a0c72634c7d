"""The HTTP door attacked as an outsider would: each case's expected status and body, a victim
served during or right after it, and nothing left behind (no call, no block, pools and tables
agreeing). The gRPC door's matrix is test_hardening.py; bench/notes/2026-12-01-hardening.md
summarises both."""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time

import pytest
from grpc_helpers import start, wait_idle

from server.http_server import MAX_HTTP_CONNECTIONS

MESSAGES = [{"role": "user", "content": "w5 w6"}]


@pytest.fixture(scope="module")
def server(tiny_llama_dir):
    # Small program caps so that a flood of program ids meets them within the test; a short
    # context so that "the whole context" is quick to generate.
    running = start(tiny_llama_dir, port=None, http_port=0, served_model_name="tiny",
                    max_programs_per_tenant=40, program_ttl=600.0, max_model_len=64)
    yield running
    running.stop(grace=0)


def address(server) -> tuple[str, int]:
    host, port = server.http_address.rsplit(":", 1)
    return host, int(port)


def post(server, body: bytes, path: str = "/v1/chat/completions",
         headers: dict[str, str] | None = None) -> tuple[int, dict]:
    connection = http.client.HTTPConnection(*address(server), timeout=60)
    connection.request("POST", path, body=body,
                       headers={"Content-Type": "application/json", **(headers or {})})
    response = connection.getresponse()
    answer = json.loads(response.read() or b"null")
    connection.close()
    return response.status, answer


def chat(**fields) -> bytes:
    return json.dumps({"model": "tiny", "messages": MESSAGES, "max_tokens": 4,
                       "temperature": 0, **fields}).encode()


def victim_served(server) -> None:
    status, answer = post(server, chat(ignore_eos=True))
    assert status == 200 and answer["usage"]["completion_tokens"] == 4, answer


def raw_request(server, body: bytes, receive_buffer: int | None = None) -> socket.socket:
    """A socket that has sent a whole chat request (and reads nothing)."""
    sock = socket.create_connection(address(server))
    if receive_buffer is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                 b"application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    return sock


@pytest.mark.parametrize("body", [
    b'{"model": "tiny", "messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",  # nested
    b'{"model": "tiny", "messages": [{"role": "user", "content": "\xff\xfe"}]}',  # not UTF-8
])
def test_unparseable_bodies_are_400_in_openais_body(server, body):
    status, answer = post(server, body)
    assert (status, answer["error"]["message"]) == (400, "body: not valid JSON")
    victim_served(server)


def test_a_50_mb_body_is_413_before_it_is_read(server):
    connection = http.client.HTTPConnection(*address(server), timeout=30)
    connection.putrequest("POST", "/v1/chat/completions")
    connection.putheader("Content-Type", "application/json")
    connection.putheader("Content-Length", str(50 << 20))
    connection.endheaders()  # the body never follows: the server must not wait for it
    response = connection.getresponse()
    answer = json.loads(response.read())
    # closed, not kept alive: kept, the server would read and drop the 50 MB before the next
    # request (bench.studies.hardening.stall's http_huge_body measured what that costs a
    # victim)
    assert response.getheader("Connection") == "close" and response.will_close
    connection.close()
    assert response.status == 413 and "larger than the server's limit" in \
        answer["error"]["message"]
    victim_served(server)


def test_500_slowloris_connections_do_not_hold_up_a_victim(server):
    socks = []
    try:
        for _ in range(500):
            sock = socket.create_connection(address(server))
            sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")  # never ends
            socks.append(sock)
        started = time.monotonic()
        victim_served(server)
        assert time.monotonic() - started < 10
        assert len(socks) < MAX_HTTP_CONNECTIONS  # under the bound: all were accepted
    finally:
        for sock in socks:
            sock.close()
    wait_idle(server)


def test_sse_consumers_that_never_read_end_when_they_close(server):
    """16 choices of the whole context to a socket that reads nothing (a small receive
    buffer; whether the server's send buffer fills depends on the kernel): the engine goes
    on serving a victim, and once the socket closes nothing of the calls is left (a stream
    whose consumer falls 1,024 items behind is cut: test_call_stream_bound.py)."""
    sock = raw_request(server, chat(stream=True, n=16, max_tokens=None, ignore_eos=True),
                       receive_buffer=4096)
    try:
        time.sleep(1.0)
        victim_served(server)
    finally:
        sock.close()
    wait_idle(server, timeout=30)


def test_200_disconnects_mid_stream_leave_nothing(server):
    def one() -> None:
        sock = raw_request(server, chat(stream=True, max_tokens=200, ignore_eos=True))
        sock.recv(64)  # the stream has begun
        sock.close()

    threads = [threading.Thread(target=one) for _ in range(200)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    wait_idle(server, timeout=60)
    victim_served(server)


def test_many_clients_asking_16_choices_of_the_whole_context(server):
    statuses: list[int] = []

    def one() -> None:
        status, answer = post(server, chat(n=16, max_tokens=None, ignore_eos=True))
        statuses.append(status)
        if status == 200:
            assert len(answer["choices"]) == 16

    threads = [threading.Thread(target=one) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert len(statuses) == 4 and set(statuses) <= {200, 429}
    wait_idle(server, timeout=30)
    victim_served(server)


def test_a_flood_of_distinct_program_ids_meets_the_program_cap(server):
    """Each unknown X-Program-Id starts a program (TTL 600 s): past the tenant's cap of 40
    the requests are 429 naming it, and the programs never exceed it."""
    before = server.engine_loop.call(lambda e: e.stats().load.programs_active)
    statuses: list[int] = []
    lock = threading.Lock()

    def one(index: int) -> None:
        status, answer = post(server, chat(max_tokens=1),
                              headers={"X-Program-Id": f"flood-{index}"})
        with lock:
            statuses.append(status)
        if status == 429:
            assert "max_programs_per_tenant" in answer["error"]["message"], answer

    threads = [threading.Thread(target=one, args=(i,)) for i in range(120)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert statuses.count(200) == 40 - before and statuses.count(429) == 120 - (40 - before)
    assert server.engine_loop.call(lambda e: e.stats().load.programs_active) == 40
    wait_idle(server)
