"""Helpers for the router tests: replicas in this process or as `agentix serve` processes,
and a router in front of them."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from grpc_helpers import start

from server.router import start_router

TOKEN = "router-secret"
READY = "agentix serving on "


def agentix(*args: str) -> subprocess.Popen:
    """`agentix ARGS` as a process, its output piped."""
    return subprocess.Popen([sys.executable, "-m", "server.cli", *args], text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL)


def in_process_replicas(model_dir: str, count: int = 2, **kwargs):
    return [start(model_dir, router_token=TOKEN, **kwargs) for _ in range(count)]


def router_over(replicas, placement, **kwargs):
    addresses = [r if isinstance(r, str) else r.address for r in replicas]
    return start_router(replicas=addresses, placement=placement, router_token=TOKEN,
                        poll_seconds=0.2, **kwargs)


def wait_until(predicate, timeout: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


class ReplicaProcess:
    """`agentix serve` over the tiny model in a process of its own (so it can be killed)."""

    def __init__(self, model_dir: str, token_file: Path, *extra: str, port: int = 0) -> None:
        args = [sys.executable, "-m", "server.cli", "serve", "--model", model_dir,
                "--port", str(port), "--router-token-file", str(token_file), "--grace", "0",
                "--num-kv-blocks", "64", "--set", "block_size=8", *extra]
        self.process = subprocess.Popen(args, stdout=subprocess.PIPE, text=True,
                                        stdin=subprocess.DEVNULL)
        self.address: str | None = None

    def wait_ready(self, timeout: float = 60.0) -> str:
        deadline = time.monotonic() + timeout
        while self.address is None:
            line = self.process.stdout.readline()
            if not line and self.process.poll() is not None:
                raise RuntimeError(f"replica exited with {self.process.returncode}")
            if line.startswith(READY):
                self.address = line[len(READY):].strip()
            if time.monotonic() > deadline:
                raise RuntimeError("replica did not start")
        return self.address

    def kill(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(10)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()
        if self.process.stdout is not None:
            self.process.stdout.close()


class Partition:
    """A TCP relay to `address` (a replica the router reaches through `self.address`);
    `cut()` drops its connections and refuses new ones, as a network partition would."""

    def __init__(self, address: str) -> None:
        host, port = address.rsplit(":", 1)
        self.target = (host, int(port))
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.sockets: list[socket.socket] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:  # cut
                return
            upstream = socket.create_connection(self.target)
            with self.lock:
                self.sockets += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=_relay, args=(source, sink), daemon=True).start()

    def cut(self) -> None:
        for sock in [self.listener, *self.sockets]:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)  # wakes the threads blocked on it
            sock.close()


def _relay(source: socket.socket, sink: socket.socket) -> None:
    """Copy `source` to `sink` until either closes."""
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            sink.sendall(data)
