"""Tensor parallelism across nodes (SGLang's flags: `--nnodes N --node-rank R
--dist-init-addr HOST:PORT`).

`tensor_parallel_size` T ranks run T / N to a node. Node 0 runs the engine: rank 0 (the
scheduler and its `TensorParallelExecutor`), which listens on `dist_init_addr` for the
torch.distributed store, and its local workers, ranks 1 .. T/N - 1. Every other node runs
`serve_node` (`agentix serve --node-rank R ...`): it reads rank 0's engine config from the
store (so every rank builds the same shard and KV cache spec), starts the node's workers,
ranks R*T/N .. (R+1)*T/N - 1, as the local ones are started (`WorkerPool`), and relays
every step to them. Steps reach the nodes through a `NodeRelay`: a gloo group of one
process per node (rank 0 and the node agents) over the same store, in which rank 0
broadcasts each pickled step. The ranks then meet in the model's collectives as on one node.

Nothing is left behind: a node agent stops its workers and exits when rank 0 says stop (None:
the engine closed, status 0; `EngineBroken`: a rank died or a step failed, status 1), when
the relay breaks (rank 0's node died), when one of its own workers died (at the next step,
which rank 0 sends at least once a second while it serves) and on SIGTERM; its workers die
with it. Rank 0's next step fails when a node is gone (its collectives and the relay break),
which breaks its engine (`TensorParallelExecutor`). The store and the relay trust the network
they run on: `dist_init_addr` must be reachable by the cluster's nodes only.
"""

from __future__ import annotations

import datetime
import os
import pickle
import signal
import sys
from dataclasses import dataclass

import torch
import torch.distributed as dist

from scheduler.addresses import parse_address

# Node agents wait for rank 0's next step for as long as the engine idles; a dead peer
# breaks the group's connections at once, and a broken engine says so (`EngineBroken`), so
# no timeout is needed to notice either.
RELAY_TIMEOUT = datetime.timedelta(days=365)
SETUP_KEY = "agentix/engine-setup"


@dataclass(frozen=True)
class EngineBroken:
    """Rank 0's last message to the node agents when its engine broke (`reason`)."""

    reason: str


def parse_dist_addr(text: str) -> tuple[str, int]:
    """`HOST:PORT` -> (HOST, PORT), ValueError naming dist_init_addr otherwise."""
    return parse_address(text, "dist_init_addr")


def check_nodes(world: int, nnodes: int, dist_init_addr: str | None) -> None:
    """ValueError naming the field unless `nnodes` >= 1 divides `world` (the ranks) and
    more than one node has a `dist_init_addr`."""
    if not isinstance(nnodes, int) or nnodes < 1:
        raise ValueError(f"nnodes must be an int >= 1, got {nnodes!r}")
    if world % nnodes:
        raise ValueError(f"tensor_parallel_size {world} must split evenly over nnodes "
                         f"{nnodes}")
    if nnodes > 1:
        if dist_init_addr is None:
            raise ValueError("dist_init_addr: needed with nnodes > 1 (HOST:PORT of node 0)")
        parse_dist_addr(dist_init_addr)


def node_ranks(world: int, nnodes: int, node_rank: int) -> range:
    """The tensor-parallel ranks node `node_rank` runs."""
    per_node = world // nnodes
    return range(node_rank * per_node, (node_rank + 1) * per_node)


class NodeRelay:
    """Rank 0's steps to the other nodes' agents (see the module docstring): node 0 `send`s
    any picklable object, every other node `recv`s it, in the same order. Constructing it is
    collective: it returns once every node has joined."""

    def __init__(self, store: dist.Store, node_rank: int, nnodes: int) -> None:
        self.store = store  # kept alive as long as the group
        self.group = dist.ProcessGroupGloo(dist.PrefixStore("agentix-nodes", store),
                                           node_rank, nnodes, RELAY_TIMEOUT)

    def send(self, message: object) -> None:
        data = bytearray(pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL))
        self.group.broadcast([torch.tensor([len(data)], dtype=torch.int64)], _root()).wait()
        self.group.broadcast([torch.frombuffer(data, dtype=torch.uint8)], _root()).wait()

    def recv(self) -> object:
        size = torch.zeros(1, dtype=torch.int64)
        self.group.broadcast([size], _root()).wait()
        data = torch.empty(int(size), dtype=torch.uint8)
        self.group.broadcast([data], _root()).wait()
        return pickle.loads(data.numpy().tobytes())


def _root() -> dist.BroadcastOptions:
    options = dist.BroadcastOptions()
    options.rootRank = 0
    return options


def publish_setup(store: dist.Store, config, max_model_len: int) -> None:
    """Rank 0: what the other nodes' workers load (its EngineConfig and context)."""
    store.set(SETUP_KEY, pickle.dumps((config, max_model_len)))


def serve_node(node_rank: int, nnodes: int, world: int, dist_init_addr: str,
               threads: int | None = None) -> int:
    """Run node `node_rank` (> 0) of an engine's tensor-parallel group until rank 0 stops it
    or goes away; returns the exit status (0: stopped by rank 0). Prints one line when its
    workers are ready."""
    from engine.parallel.comm import connect_store
    from engine.parallel.setup import WorkerSetup
    from engine.parallel.workers import WorkerError, WorkerPool

    check_nodes(world, nnodes, dist_init_addr)
    if not 0 < node_rank < nnodes:
        raise ValueError(f"node_rank must be in [1, {nnodes - 1}] on a worker node, got "
                         f"{node_rank}")
    host, port = parse_dist_addr(dist_init_addr)
    store = connect_store(host, port, world)
    config, max_model_len = pickle.loads(store.get(SETUP_KEY))
    ranks = node_ranks(world, nnodes, node_rank)
    threads = threads or max(1, torch.get_num_threads() // len(ranks))
    pool = WorkerPool([WorkerSetup(config, rank, world, host, port, max_model_len, threads,
                                   os.getpid(), local_rank=rank - ranks.start)
                       for rank in ranks])
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # finally: below stops them
    status = 1
    try:
        relay = NodeRelay(store, node_rank, nnodes)
        print(f"agentix node {node_rank}: ranks {ranks.start}-{ranks.stop - 1} joined "
              f"(pids {' '.join(map(str, pool.pids))})", flush=True)
        while True:
            step = relay.recv()
            if step is None:
                status = 0
                return status
            if isinstance(step, EngineBroken):
                _stopping(node_rank, f"the engine broke: {step.reason}")
                return status
            pool.send(step)
    except (RuntimeError, WorkerError) as exc:  # the relay broke, or a worker here died
        _stopping(node_rank, str(exc))
        return status
    finally:
        if status == 0:
            pool.close()
        else:
            pool.kill()


def _stopping(node_rank: int, why: str) -> None:
    _say(f"agentix node {node_rank}: stopping: {why}")


def _say(line: str) -> None:
    """`line` on stderr in one write, so the workers' output sharing it cannot split it."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()
