"""An agentix server run as a child process from a given checkout (bench.studies.hardening.stall and
bench.studies.hardening.memory_flood measure it from outside, so an older checkout can be measured
too)."""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Mapping

import psutil

MB = 1 << 20


def server_env(root: Path) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(Path(root).resolve()), PYTHONUNBUFFERED="1")


def serves_http(root: Path) -> bool:
    """Whether the checkout at `root` has `serve --http-port` (older ones serve gRPC only)."""
    done = subprocess.run([sys.executable, "-m", "server.cli", "serve", "--help"], cwd=root,
                          env=server_env(root), capture_output=True, text=True, timeout=120)
    return "--http-port" in done.stdout


class Server:
    """`python -m server.cli serve --model DIR --port 0 [--http-port 0] [extra]` run from
    `root`; `address` (gRPC) and, with `http`, `http_address` from its "agentix serving on
    HOST:PORT" and "http serving on HOST:PORT" lines; `env` adds to its environment. stderr
    goes to a log file (shown on failure)."""

    def __init__(self, model: str, root: Path, extra: list[str] = (), timeout: float = 300.0,
                 http: bool = False, env: Mapping[str, str] | None = None):
        self.root = Path(root).resolve()
        self.log = tempfile.NamedTemporaryFile("w+", prefix="agentix-serve-", suffix=".log")
        cmd = [sys.executable, "-m", "server.cli", "serve", "--model", model, "--port", "0",
               *(["--http-port", "0"] if http else []), *extra]
        self.proc = subprocess.Popen(cmd, cwd=self.root,
                                     env={**server_env(self.root), **(env or {})},
                                     stdout=subprocess.PIPE, stderr=self.log, text=True)
        self.pid = self.proc.pid
        # Keep reading stdout so the server can never block on a full pipe.
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        addresses = self._wait_addresses({"agentix", "http"} if http else {"agentix"}, timeout)
        self.address = addresses["agentix"]
        self.http_address = addresses.get("http")

    def _pump(self) -> None:
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def _wait_addresses(self, labels: set[str], timeout: float) -> dict[str, str]:
        """{label: address} from the "LABEL serving on ADDRESS" lines of `labels`."""
        deadline = time.monotonic() + timeout
        found: dict[str, str] = {}
        while time.monotonic() < deadline:
            try:
                line = self._lines.get(timeout=0.5)
            except queue.Empty:
                continue
            if line is None:
                break
            label, on, address = line.strip().partition(" serving on ")
            if on and label in labels:
                found[label] = address
                if set(found) == labels:
                    return found
        self.stop()
        self.log.seek(0)
        raise RuntimeError(f"the server did not start:\n{self.log.read()[-3000:]}")

    def rss_mb(self) -> float:
        return psutil.Process(self.pid).memory_info().rss / MB

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def git_commit(root: Path) -> str | None:
    try:
        return subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
