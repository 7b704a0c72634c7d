"""A step's flattened inputs (engine/step_inputs.py): exact tokens, positions, slots and
tables for a scripted step, and the same tensors through the one-transfer staging path."""

from __future__ import annotations

import torch

from engine import LLM, SamplingParams
from engine.staging import HostStaging
from engine.step_inputs import StepInputs
from test_parity import RecordingExecutor


def recorded_plans(model_dir):
    llm = LLM(model_dir, block_size=8, num_kv_blocks=16)
    recorder = llm.engine.executor = RecordingExecutor(llm.engine.runner)
    llm.generate([[5, 6, 7], list(range(10, 20))], SamplingParams(max_tokens=2, ignore_eos=True))
    return recorder.plans


def test_exact_inputs_of_a_prefill_and_a_decode_step(tiny_llama_dir):
    prefill, decode = recorded_plans(tiny_llama_dir)[:2]
    step = StepInputs.of(prefill, 8)
    first, second = (c.block_table for c in prefill.chunks)
    assert step.token_ids == [5, 6, 7, *range(10, 20)]
    assert step.positions == [0, 1, 2, *range(10)]
    assert step.slots == [first[0] * 8 + p for p in range(3)] + [
        second[p // 8] * 8 + p % 8 for p in range(10)]
    assert (step.num_decode, step.prefill_starts, step.prefill_lens) == (0, [0, 3, 13], [3, 10])
    assert step.sample_rows == [2, 12]
    step = StepInputs.of(decode, 8)
    assert (step.num_decode, step.positions, step.decode_lens, step.sample_rows) == (
        2, [3, 10], [4, 11], [0, 1])


def test_staging_gives_the_same_tensors(tiny_llama_dir):
    staging = HostStaging(torch.device("cpu"))
    for plan in recorded_plans(tiny_llama_dir):
        step = StepInputs.of(plan, 8)
        direct = step.tensors(torch.device("cpu"))
        staged = step.tensors(torch.device("cpu"), staging)
        for a, b in zip(direct[:2] + direct[3:], staged[:2] + staged[3:]):
            assert torch.equal(a, b)
        for name in ("slot_mapping", "decode_block_tables", "decode_context_lens",
                     "prefill_block_tables", "prefill_query_start_loc", "prefill_context_lens"):
            a, b = getattr(direct[2], name), getattr(staged[2], name)
            assert a.dtype == b.dtype and torch.equal(a, b), name
