"""Tensor parallelism across two "nodes" on 127.0.0.1 over gloo: node 0 is this process's
engine (rank 0), node 1 an `agentix serve --node-rank 1` process running rank 1. The tokens
are transformers' exactly, and nothing is left behind when the engine closes, when either
node dies, or when a worker dies (at TP=4: the engine breaks and tells node 1 to stop)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from processes import wait_gone
from test_parity import make_prompts, params, reference
from agentix_testing.tiny_llama import GreedyReference, build_tiny_llama
from engine import LLM, EngineConfig, SamplingParams
from engine.errors import EngineBrokenError, StepFailedError
from engine.parallel.nodes import check_nodes, node_ranks

ROOT = Path(__file__).resolve().parents[2]
STOPPING = "agentix node 1: stopping: "


@pytest.fixture(scope="module")
def tp_model(tmp_path_factory):
    """(model_dir, transformers' greedy answers): 4 query heads over 2 KV heads, untied."""
    path = tmp_path_factory.mktemp("tp-nodes")
    return str(path), GreedyReference(build_tiny_llama(path, tie_word_embeddings=False))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Node:
    """`agentix serve --node-rank 1` of a `world`-rank, 2-node engine; `pids` its workers',
    `stopping` why it said it stops (None: it did not say), `lines` all it printed."""

    def __init__(self, model_dir: str, address: str, world: int = 2) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "server.cli", "serve", "--model", model_dir,
             "--tensor-parallel-size", str(world), "--nnodes", "2", "--node-rank", "1",
             "--dist-init-addr", address],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
            stdin=subprocess.DEVNULL)
        self.pids: list[int] = []
        self.stopping: str | None = None
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.lines.append(line)
            if "joined (pids " in line:
                self.pids = [int(p) for p in line.split("(pids ")[1].rstrip(")\n").split()]
            if STOPPING in line:  # a worker's unfinished line may precede it (shared pipe)
                self.stopping = line.split(STOPPING, 1)[1].rstrip("\n")

    def wait(self, timeout: float = 30.0) -> int:
        """The exit status, once its output is read to the end."""
        status = self.process.wait(timeout)
        self._reader.join(timeout)
        return status

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)


def two_node_llm(model_dir: str, world: int = 2) -> tuple[LLM, Node]:
    address = f"127.0.0.1:{free_port()}"
    node = Node(model_dir, address, world)
    try:
        llm = LLM(model_dir, block_size=8, num_kv_blocks=80, tensor_parallel_size=world,
                  nnodes=2, dist_init_addr=address)
    except BaseException:
        node.kill()
        raise
    return llm, node


def test_two_nodes_give_transformers_tokens_and_stop_together(tp_model):
    model_dir, greedy = tp_model
    llm, node = two_node_llm(model_dir)
    try:
        assert llm.engine.executor.worker_pids == []  # rank 1 runs on node 1
        prompts = make_prompts()
        got = [o.token_ids for o in llm.generate(prompts, params())]
        llm.engine.check_integrity()
    finally:
        llm.close()
    assert got == reference(greedy, prompts)
    assert node.wait() == 0  # the engine's close stops node 1 and its worker
    assert wait_gone(node.pids, 5.0) == []


def test_when_node_1_dies_the_next_step_fails_and_nothing_is_left(tp_model):
    model_dir, _ = tp_model
    llm, node = two_node_llm(model_dir)
    try:
        deadline = time.monotonic() + 10
        while not node.pids and time.monotonic() < deadline:
            time.sleep(0.05)
        worker = node.pids
        node.kill()  # SIGKILL: no clean-up; its worker dies with it
        assert wait_gone(worker, 10.0) == []
        with pytest.raises(Exception):
            llm.generate(make_prompts()[:2], params()[:2])
    finally:
        llm.close()


def test_when_a_worker_of_node_0_dies_the_engine_breaks_and_node_1_stops(tp_model):
    """TP=4 over 2 nodes: SIGKILL of rank 1 (node 0's worker); the next step fails naming
    it, and node 1's agent, told so, stops (status 1) with its workers (ranks 2 and 3)."""
    model_dir, _ = tp_model
    llm, node = two_node_llm(model_dir, world=4)
    try:
        [pid] = llm.engine.executor.worker_pids
        os.kill(pid, signal.SIGKILL)
        assert wait_gone([pid], 5.0) == []
        with pytest.raises(StepFailedError) as failed:
            llm.generate([5, 6, 7], SamplingParams(max_tokens=3))
        broken = f"tensor-parallel worker rank 1 (pid {pid}) exited with status -9"
        assert (type(failed.value.cause), str(failed.value.cause)) == (EngineBrokenError, broken)
        assert node.wait(10) == 1
        assert node.stopping == f"the engine broke: {broken}", "".join(node.lines)
        assert len(node.pids) == 2 and wait_gone(node.pids, 5.0) == []
    finally:
        llm.close()
        node.kill()


def test_when_node_0_dies_node_1_stops(tp_model, tmp_path):
    model_dir, _ = tp_model
    address = f"127.0.0.1:{free_port()}"
    node = Node(model_dir, address)
    script = (f"import sys, time; sys.path.insert(0, {str(ROOT)!r})\n"
              f"from engine import LLM\n"
              f"llm = LLM({model_dir!r}, num_kv_blocks=80, block_size=8, "
              f"tensor_parallel_size=2, nnodes=2, dist_init_addr={address!r})\n"
              f"print('ready', flush=True); time.sleep(600)\n")
    engine = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert engine.stdout.readline().strip() == "ready"
        worker = node.pids
        os.kill(engine.pid, signal.SIGKILL)
        assert node.wait(60) != 0
        assert wait_gone(worker, 10.0) == []
    finally:
        engine.kill()
        engine.wait(10)
        node.kill()


def test_bad_node_settings_are_refused():
    assert list(node_ranks(8, 2, 1)) == [4, 5, 6, 7]
    with pytest.raises(ValueError, match="must split evenly over nnodes 2"):
        check_nodes(3, 2, "h:1")
    with pytest.raises(ValueError, match="dist_init_addr: needed with nnodes > 1"):
        EngineConfig(tensor_parallel_size=2, nnodes=2)
    with pytest.raises(ValueError, match="dist_init_addr: expected HOST:PORT"):
        EngineConfig(tensor_parallel_size=2, nnodes=2, dist_init_addr="node0")
