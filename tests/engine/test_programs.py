"""The engine's program API on the tiny model: priority preemption by bulk swap with
bit-identical KV, ending programs, aborts."""

from __future__ import annotations

import dataclasses
import time

import pytest
import torch

from agentix_testing.tiny_llama import hf_greedy
from engine import LLMEngine, EngineConfig, SamplingParams
from scheduler.process_table import ProgramState, UnknownProgramError

LOW_PROMPT = [11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21]
HIGH_PROMPT = [40, 41, 42, 43, 44]


class CheckingExecutor:
    """Makes the plan's swap copies itself and checks every swapped-in block holds exactly
    the bytes it held when it was swapped out; then runs the rest on the real runner."""

    def __init__(self, runner):
        self.runner, self.saved, self.restored = runner, {}, 0

    def execute(self, plan):
        kv = self.runner.kv_cache
        for device_block, host_block in plan.swap_out:
            self.saved[host_block] = kv[device_block].clone()
        started = time.perf_counter()
        self.runner.swapper.swap_out(plan.swap_out)
        self.runner.swapper.swap_in(plan.swap_in)
        swap_seconds = time.perf_counter() - started
        for host_block, device_block in plan.swap_in:
            assert torch.equal(kv[device_block], self.saved.pop(host_block))
            self.restored += 1
        result = self.runner.execute(dataclasses.replace(plan, swap_out=[], swap_in=[]))
        return dataclasses.replace(result, swap_seconds=swap_seconds)


def make_engine(model_dir, **overrides) -> LLMEngine:
    config = dict(model=model_dir, block_size=4, num_kv_blocks=64, policy="plas",
                  service_mode="tokens", quantum_base=8, num_queues=4, starvation_beta=None)
    return LLMEngine(EngineConfig.from_flat(**{**config, **overrides}))


def drain(engine) -> dict[str, list[int]]:
    tokens: dict[str, list[int]] = {}
    while engine.has_unfinished_calls():
        for out in engine.step():
            tokens.setdefault(out.call_id, []).extend(out.new_token_ids)
    engine.check_integrity()
    return tokens


def test_priority_preemption_swaps_with_identical_kv_and_exact_tokens(tiny_llama):
    model_dir, model = tiny_llama
    engine = make_engine(model_dir, max_num_seqs=1, preemption_mode="swap",
                         num_host_blocks=32)
    checker = engine.executor = CheckingExecutor(engine.runner)
    engine.start_program("low")
    engine.get_program("low").service = 100.0  # a long history: bottom queue
    engine.add_call("low", LOW_PROMPT, SamplingParams(max_tokens=12, ignore_eos=True),
                    call_id="low-1")
    engine.step()
    engine.step()
    engine.start_program("high")
    engine.add_call("high", HIGH_PROMPT, SamplingParams(max_tokens=6, ignore_eos=True),
                    call_id="high-1")
    finished = []
    tokens: dict[str, list[int]] = {}
    while engine.has_unfinished_calls():
        for out in engine.step():
            tokens.setdefault(out.call_id, []).extend(out.new_token_ids)
            if out.finished:
                finished.append(out.call_id)
    engine.check_integrity()
    assert engine.scheduler.num_swap_outs == 1 and engine.scheduler.num_swap_ins == 1
    # low's 12 tokens in 4-token blocks, and the block its multistep round (cut by high's
    # arrival) had reserved for tokens 13-15
    assert checker.restored == 4 and not checker.saved
    assert finished == ["high-1", "low-1"]
    assert engine.pop_completion("low-1").token_ids == hf_greedy(model, LOW_PROMPT, 12)
    assert engine.pop_completion("high-1").token_ids == hf_greedy(model, HIGH_PROMPT, 6)
    assert engine.get_program("low").swap_time > 0
    assert engine.runner.swapper.num_copies == 2


def test_end_program_aborts_its_calls_and_frees_their_blocks(tiny_llama_dir):
    engine = make_engine(tiny_llama_dir)
    free = engine.kv.num_free_blocks
    pid = engine.start_program(tenant="t1")
    ids = [engine.add_call(pid, [5, 6, 7, 8, 9], SamplingParams(max_tokens=50, ignore_eos=True),
                           thread_id=str(i)) for i in range(3)]
    engine.step()
    engine.step()
    assert engine.kv.num_free_blocks < free
    record = engine.end_program(pid)
    assert record.state is ProgramState.COMPLETED and record.num_calls == 3
    assert engine.kv.num_free_blocks == free
    outputs = engine.step()
    assert sorted((o.call_id, o.finished, o.finish_reason) for o in outputs) == \
        [(i, True, "abort") for i in ids]
    assert [engine.pop_completion(i).finish_reason for i in ids] == ["abort"] * 3
    assert engine.end_program(pid) is record
    with pytest.raises(UnknownProgramError):
        engine.get_program(pid)
    engine.check_integrity()


def test_abort_call_frees_blocks_and_reports_abort(tiny_llama_dir):
    engine = make_engine(tiny_llama_dir)
    free = engine.kv.num_free_blocks
    pid = engine.start_program()
    call = engine.add_call(pid, [5, 6, 7], SamplingParams(max_tokens=40, ignore_eos=True))
    engine.step()
    engine.abort_call(call)
    assert engine.kv.num_free_blocks == free
    assert [(o.call_id, o.finish_reason) for o in engine.step()] == [(call, "abort")]
    assert engine.get_program(pid).active_calls == {}
    engine.check_integrity()


def test_unknown_program_is_a_named_error_and_records_nothing(tiny_llama_dir):
    engine = make_engine(tiny_llama_dir)
    with pytest.raises(KeyError, match="ghost"):
        engine.add_call("ghost", [5, 6, 7])
    assert not engine.has_unfinished_calls() and not engine.calls
    engine.check_integrity()


def test_multistep_gives_the_same_tokens_and_schedules_about_four_times_less(tiny_llama_dir):
    prompts = [[5 + i, 6, 7, 8 + i] for i in range(4)]
    results = {}
    for n in (1, 4):
        engine = make_engine(tiny_llama_dir, policy="fcfs", multistep=n)
        for p in prompts:
            engine.add_call(None, p, SamplingParams(max_tokens=29, ignore_eos=True))
        results[n] = (drain(engine), engine.scheduler.num_rounds, engine.scheduler.num_steps)
    assert list(results[1][0].values()) == list(results[4][0].values())
    assert results[1][1] == results[1][2] == 29
    assert results[4][2] == 29 and results[4][1] == 1 + 7  # prefill round + 28 / 4
