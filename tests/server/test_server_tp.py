"""A server over a tensor-parallel engine (TP=2 on gloo): its tokens are the single-device
engine's, and stopping the server stops the worker process."""

from __future__ import annotations

from grpc_helpers import start
from processes import wait_gone

from engine import LLM, SamplingParams
from server.client import AgentixClient

PROMPT = [1, 17, 42, 99, 5]
MAX_TOKENS = 8


def test_serving_at_tensor_parallel_2(tiny_llama_dir):
    with LLM(tiny_llama_dir, block_size=8, num_kv_blocks=64) as llm:
        [expected] = llm.generate([PROMPT], SamplingParams(max_tokens=MAX_TOKENS,
                                                           ignore_eos=True))
    server = start(tiny_llama_dir, tensor_parallel_size=2)
    pids = server.engine_loop.call(lambda engine: engine.executor.worker_pids)
    try:
        with AgentixClient(server.address) as client:
            got = client.generate(PROMPT, max_tokens=MAX_TOKENS, ignore_eos=True)
        assert list(got.token_ids) == expected.token_ids
        assert len(pids) == 1 and wait_gone(pids, 0.0) == pids
    finally:
        server.stop(grace=0)
    assert wait_gone(pids, 0.0) == []   # stop waited for it
