"""Agent frameworks offline, for the test modules that run them: importing this module turns
their tracing off (no upload to OpenAI or LangSmith), so import it before the frameworks; a
module that imports the `offline` fixture fails if anything in it reaches past loopback."""

from __future__ import annotations

import ipaddress
import os
import socket

os.environ["OPENAI_AGENTS_DISABLE_TRACING"] = "1"
os.environ["LANGSMITH_TRACING"] = os.environ["LANGCHAIN_TRACING_V2"] = "false"

import pytest  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def offline():
    """Fails the module if anything in it (a tracing exporter, a tokenizer or hub download)
    looks up or connects to a host other than loopback: each such attempt is refused and
    recorded."""
    import agents

    attempts: list[object] = []
    real_connect, real_getaddrinfo = socket.socket.connect, socket.getaddrinfo

    def loopback(host) -> bool:
        if isinstance(host, bytes):
            host = host.decode()
        if host in (None, "localhost"):
            return True
        try:
            return ipaddress.ip_address(str(host).split("%")[0]).is_loopback
        except ValueError:
            return False

    def connect(sock, address):
        if sock.family in (socket.AF_INET, socket.AF_INET6) and not loopback(address[0]):
            attempts.append(address)
            raise OSError(f"offline test: no connection to {address}")
        return real_connect(sock, address)

    def getaddrinfo(host, *args, **kwargs):
        if not loopback(host):
            attempts.append(host)
            raise socket.gaierror(f"offline test: no lookup of {host}")
        return real_getaddrinfo(host, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(socket.socket, "connect", connect)
        patch.setattr(socket, "getaddrinfo", getaddrinfo)
        agents.set_tracing_disabled(True)
        yield
    assert attempts == []
