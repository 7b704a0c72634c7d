"""Prompt logprobs (`SamplingParams.prompt_logprobs`) are transformers' log_softmax of the
logits at position i - 1 for each prompt token i >= 1, with the top alternatives in
transformers' order: over several KV blocks and chunked-prefill chunks, batched beside calls
that do not ask (unchanged), with a warm prefix cache (not used), under preemption mid-prompt
(recompute, swap, keep: collected once), and under tensor parallelism."""

from __future__ import annotations

import random

import pytest
import torch

from bench.sim.cost_model import CostModel
from bench.sim.sim_executor import VirtualClock
from bench.sim.simulate import PromptMaker, sim_engine, sim_engine_config
from bench.sim.trace import Trace
from engine import LLM, SamplingParams
from engine.call import Call
from engine.logprobs import prompt_token_logprobs
from engine.outputs import CompletionOutput
from engine.step_inputs import StepInputs
from scheduler.plan import ScheduledChunk, SchedulePlan
from test_parity import RecordingExecutor

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def random_prompt(seed: int, length: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(3, 384) for _ in range(length)]


def assert_transformers_prompt_logprobs(model, out: CompletionOutput, k: int) -> None:
    """`out.prompt_logprobs` is one entry per prompt token (None first), each transformers'
    log_softmax at the position before it, with its k most likely alternatives."""
    prompt = out.prompt_token_ids
    with torch.no_grad():
        logits = model(torch.tensor([prompt])).logits[0, :-1].float()
    expected = torch.log_softmax(logits, dim=-1)
    assert len(out.prompt_logprobs) == len(prompt) and out.prompt_logprobs[0] is None
    scored = out.prompt_logprobs[1:]
    assert [lp.token_id for lp in scored] == prompt[1:]
    want = expected.gather(1, torch.tensor(prompt[1:])[:, None]).squeeze(1)
    torch.testing.assert_close(torch.tensor([lp.logprob for lp in scored]), want,
                               atol=1e-4, rtol=0)
    top = expected.topk(k, dim=-1)
    assert [[t for t, _ in lp.top] for lp in scored] == top.indices.tolist()
    torch.testing.assert_close(torch.tensor([[v for _, v in lp.top] for lp in scored]),
                               top.values, atol=1e-4, rtol=0)


def test_prompt_logprobs_over_blocks_and_chunks_beside_calls_that_do_not_ask(
        tiny_tied_llama, tiny_tied_greedy):
    model_dir, model = tiny_tied_llama
    prompts = [random_prompt(0, 60), random_prompt(1, 13), random_prompt(2, 21),
               random_prompt(3, 9)]
    params = [SamplingParams(max_tokens=5, ignore_eos=True, prompt_logprobs=4),
              SamplingParams(max_tokens=7, ignore_eos=True),
              SamplingParams(max_tokens=6, ignore_eos=True, logprobs=2),
              SamplingParams(max_tokens=4, ignore_eos=True, prompt_logprobs=0)]
    llm = LLM(model_dir, block_size=8, num_kv_blocks=40, max_num_batched_tokens=16)
    recorder = llm.engine.executor = RecordingExecutor(llm.engine.runner)
    outs = llm.generate(prompts, params)
    llm.engine.check_integrity()
    first_prefill = [c for p in recorder.plans for c in p.chunks
                     if c.call.call_id == outs[0].call_id and not c.is_decode]
    assert len(first_prefill) >= 4  # 60 tokens over 8-token blocks, 16 tokens a step
    assert_transformers_prompt_logprobs(model, outs[0], 4)
    assert_transformers_prompt_logprobs(model, outs[3], 0)
    assert [o.prompt_logprobs for o in outs[1:3]] == [None, None]
    assert [len(o.logprobs) for o in outs[2:3]] == [6]
    assert [o.token_ids for o in outs] == [tiny_tied_greedy(p, s.max_tokens)
                                           for p, s in zip(prompts, params)]


def test_a_call_asking_takes_no_prefix_hits_and_leaves_its_blocks_cached(tiny_tied_llama):
    model_dir, model = tiny_tied_llama
    prompt = random_prompt(4, 41)
    asking = SamplingParams(max_tokens=2, ignore_eos=True, prompt_logprobs=3)
    llm = LLM(model_dir, block_size=8, num_kv_blocks=40, enable_prefix_caching=True)
    first = llm.generate([prompt], asking)[0]
    plain = llm.generate([prompt], SamplingParams(max_tokens=2, ignore_eos=True))[0]
    again = llm.generate([prompt], asking)[0]
    llm.engine.check_integrity()
    assert [first.num_cached_tokens, plain.num_cached_tokens, again.num_cached_tokens] == \
        [0, 40, 0]  # the asking call wrote its blocks; the warm cache did not serve it
    for out in (first, again):
        assert_transformers_prompt_logprobs(model, out, 3)
    assert first.token_ids == plain.token_ids == again.token_ids


class PreemptionWatch:
    """Runs plans on the engine's runner, noting for each preemption of a call asking for
    prompt logprobs how many it had collected."""

    def __init__(self, engine) -> None:
        self.engine, self.collected = engine, []

    def execute(self, plan):
        for call_id in plan.preempted:
            call = self.engine.calls[call_id]
            if call.params.prompt_logprobs is not None:
                self.collected.append(len(call.prompt_logprobs))
        return self.engine.runner.execute(plan)


@pytest.mark.parametrize("mode", ["recompute", "swap", "keep"])
def test_preemption_mid_prompt_collects_each_prompt_logprob_once(tiny_tied_llama,
                                                                 tiny_tied_greedy, mode):
    """The asking call comes last (FCFS preempts it) with a 48-token prompt read 8 tokens a
    step; the two calls before it outgrow the 12-block pool while it reads."""
    model_dir, model = tiny_tied_llama
    prompts = [random_prompt(5, 10), random_prompt(6, 12), random_prompt(7, 48)]
    params = [SamplingParams(max_tokens=30, ignore_eos=True)] * 2 + [
        SamplingParams(max_tokens=4, ignore_eos=True, prompt_logprobs=2)]
    llm = LLM(model_dir, block_size=8, num_kv_blocks=12, max_num_batched_tokens=8,
              preemption_mode=mode, num_host_blocks=40 if mode == "swap" else 0,
              enable_prefix_caching=mode == "keep")
    watch = llm.engine.executor = PreemptionWatch(llm.engine)
    outs = llm.generate(prompts, params)
    llm.engine.check_integrity()
    assert watch.collected and all(1 < n < 48 for n in watch.collected)  # mid-prompt
    assert outs[2].num_preemptions == len(watch.collected)
    assert outs[2].num_cached_tokens == 0
    assert_transformers_prompt_logprobs(model, outs[2], 2)
    assert [o.token_ids for o in outs] == [tiny_tied_greedy(p, s.max_tokens)
                                           for p, s in zip(prompts, params)]


def test_tensor_parallel_prompt_logprobs_are_exact(tiny_tied_llama):
    model_dir, model = tiny_tied_llama
    prompts = [random_prompt(8, 30), random_prompt(9, 11)]
    params = [SamplingParams(max_tokens=3, ignore_eos=True, prompt_logprobs=5),
              SamplingParams(max_tokens=3, ignore_eos=True)]
    llm = LLM(model_dir, block_size=8, num_kv_blocks=40, max_num_batched_tokens=12,
              tensor_parallel_size=2)
    try:
        outs = llm.generate(prompts, params)
    finally:
        llm.close()
    assert_transformers_prompt_logprobs(model, outs[0], 5)
    assert outs[1].prompt_logprobs is None


def test_prompt_rows_skip_the_positions_a_call_has_collected():
    """A recompute after preemption re-reads tokens 0..7 (rows 1..8, after another call's
    decode row); the call has collected positions 0..2, so positions 2..7 score tokens 3..8."""
    asking = Call("a", list(range(10, 22)), SamplingParams(prompt_logprobs=3), 0.0, 0, 64)
    asking.prompt_logprobs.extend([None, None])  # stand-ins: positions 1 and 2 collected
    other = Call("b", [5, 6, 7], SamplingParams(), 0.0, 1, 64)
    other.all_token_ids.append(8)
    plan = SchedulePlan(created_at=0.0, chunks=[ScheduledChunk(other, 3, 1, [1], True),
                                                ScheduledChunk(asking, 0, 8, [2], False)])
    step = StepInputs.of(plan, 8)
    assert (step.prompt_rows, step.prompt_targets) == ([3, 4, 5, 6, 7, 8], list(range(13, 19)))
    assert (step.prompt_top, step.prompt_counts) == ([3] * 6, [0, 6])
    last = StepInputs.of(SchedulePlan(0.0, [ScheduledChunk(asking, 8, 4, [2, 3], True)]), 8)
    assert last.prompt_rows == [0, 1, 2]  # position 11 is the last prompt token: it samples


def test_scoring_a_slice_of_rows_at_a_time_gives_the_same_logprobs():
    torch.manual_seed(0)
    head = torch.nn.Linear(8, 50, bias=False)
    calls = []

    def counted(hidden):
        calls.append(len(hidden))
        return head(hidden)

    hidden, tokens, wanted = torch.randn(7, 8), [3, 9, 0, 49, 7, 7, 1], [2, 0, 5, 1, 1, 3, 0]
    whole = prompt_token_logprobs(head, hidden, tokens, wanted, vocab_size=50)
    sliced = prompt_token_logprobs(counted, hidden, tokens, wanted, vocab_size=50,
                                   max_logits=3 * 50)
    assert calls == [3, 3, 1]
    assert [(lp.token_id, len(lp.top)) for lp in sliced] == list(zip(tokens, wanted))
    for a, b in zip(whole, sliced):
        assert a.token_id == b.token_id and [t for t, _ in a.top] == [t for t, _ in b.top]
        assert a.logprob == pytest.approx(b.logprob, abs=1e-6)


@pytest.mark.parametrize("bad", [-1, 21, 2.0, True])
def test_a_bad_prompt_logprobs_count_is_refused(bad):
    with pytest.raises(ValueError, match=r"prompt_logprobs: must be an integer in \[0, 20\]"):
        SamplingParams(prompt_logprobs=bad)


def test_an_injected_executor_refuses_prompt_logprobs_up_front():
    cost = CostModel.from_names("a100-80g", "llama-3.1-8b")
    engine, _ = sim_engine(sim_engine_config(Trace(()), "fcfs", cost), cost, VirtualClock(),
                           PromptMaker(cost.model.vocab))
    with pytest.raises(ValueError, match="prompt_logprobs: an injected executor"):
        engine.add_call(None, [5, 6, 7], SamplingParams(prompt_logprobs=1))
    assert not engine.has_unfinished_calls()
    engine.check_integrity()
