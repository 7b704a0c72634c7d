"""`agentix serve` as a process: a second signal ends a draining server at once, cutting
the calls in flight and leaving nothing listening."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
import time

import grpc
from grpc_helpers import gen_request

from server import agentix_pb2_grpc


def test_a_second_signal_ends_a_draining_server_at_once(tiny_llama_dir):
    process = subprocess.Popen(
        [sys.executable, "-m", "server.cli", "serve", "--model", tiny_llama_dir, "--port", "0",
         "--grace", "120", "--max-num-seqs", "1", "--set", "block_size=8",
         "--num-kv-blocks", "64"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = process.stdout.readline()
        assert line.startswith("agentix serving on "), process.stderr.read()
        address = line.split()[-1]
        ended: list[str] = []
        first_delta = threading.Event()

        def stream() -> None:
            with grpc.insecure_channel(address) as channel:
                responses = agentix_pb2_grpc.AgentixStub(channel).Generate(
                    gen_request([1, 2, 3], max_tokens=240, ignore_eos=True))
                try:
                    for response in responses:
                        first_delta.set()
                        if response.HasField("final"):
                            ended.append("final")
                except grpc.RpcError:
                    ended.append("error")

        threads = [threading.Thread(target=stream) for _ in range(16)]  # queued one by one
        for thread in threads:
            thread.start()
        assert first_delta.wait(30)
        process.send_signal(signal.SIGTERM)
        assert "agentix: draining (grace 120 s); signal again to exit now\n" \
            in iter(process.stderr.readline, "")
        time.sleep(0.5)
        assert process.poll() is None, "still draining"
        process.send_signal(signal.SIGTERM)
        started = time.perf_counter()
        assert process.wait(timeout=10) == 1
        assert time.perf_counter() - started < 3
        rest = process.stderr.read()
        assert "agentix: second signal: exiting now" in rest and "stopped" not in rest
        for thread in threads:
            thread.join(30)
        assert "error" in ended, "calls were still in flight when the process ended"
        host, port = address.rsplit(":", 1)
        with socket.socket() as sock:  # nothing of the server is left listening
            sock.bind((host, int(port)))
    finally:
        process.kill()
        process.wait()
