import statistics

import pytest

from bench.sim.sharegpt import load_conversations
from bench.sim.trace import Trace
from bench.sim.workloads import bfcl, coding, lats, mixed, sharegpt
from bench.sim.workloads.common import load_tokenizer


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer()


@pytest.fixture(scope="module")
def conversations():
    return load_conversations(limit=3000)


@pytest.fixture(scope="module")
def generators(tokenizer, conversations):
    return {
        "sharegpt": lambda n, seed: sharegpt.generate(n, seed, 1.0, tokenizer=tokenizer, conversations=conversations),
        "bfcl": lambda n, seed: bfcl.generate(n, seed, 1.0, tokenizer=tokenizer),
        "lats": lambda n, seed: lats.generate(n, seed, 1.0),
        "mixed": lambda n, seed: mixed.generate(n, seed, 1.0, tokenizer=tokenizer, conversations=conversations),
        "coding": lambda n, seed: coding.generate(n, seed, 1.0),
    }


def all_calls(trace: Trace):
    return [c for p in trace.programs for c in p.calls]


@pytest.mark.parametrize("name", ["sharegpt", "bfcl", "lats", "mixed"])
def test_deterministic_per_seed(generators, name):
    a = generators[name](6, 1)
    assert a == generators[name](6, 1)
    assert a != generators[name](6, 2)
    assert len(a.programs) == 6
    assert len({p.program_id for p in a.programs}) == 6
    arrivals = [p.arrival for p in a.programs]
    assert arrivals == sorted(arrivals) and arrivals[0] > 0


@pytest.mark.parametrize("name", ["sharegpt", "bfcl", "lats", "mixed", "coding"])
def test_a_longer_trace_starts_with_the_shorter_one(generators, name):
    # The steady-state search grows a seed's trace as the rate (and a warm-up set in seconds)
    # grows, and needs the programs already measured to stay the same ones.
    short, longer = generators[name](5, 3), generators[name](11, 3)
    assert longer.programs[:5] == short.programs


def test_sharegpt_is_a_chain_with_growing_prompts(generators):
    trace = generators["sharegpt"](30, 0)
    assert any(len(p.calls) > 1 for p in trace.programs)
    for program in trace.programs:
        assert program.workload == "sharegpt"
        for prev, call in zip(program.calls, program.calls[1:]):
            assert call.parents == (prev.call_id,)
            assert call.prompt_len > prev.prompt_len + prev.output_len
            assert call.delay == 0.0
        assert program.calls[0].parents == ()


def test_incremental_chat_count_close_to_exact_template_count(tokenizer, conversations):
    from bench.sim.workloads.common import measure_chat_overhead, token_counts

    overhead = measure_chat_overhead(tokenizer)
    conv = next(c for c in conversations if len(c.turns) >= 6 and c.turns[0].role == "human")
    messages = [{"role": "user" if i % 2 == 0 else "assistant", "content": t.text} for i, t in enumerate(conv.turns[:5])]
    rendered = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    exact = len(tokenizer.encode(rendered, add_special_tokens=False))
    counts = token_counts(tokenizer, [m["content"] for m in messages])
    approx = overhead.system_tokens(None) + sum(overhead.per_message + n for n in counts) + overhead.generation
    assert abs(approx - exact) <= 2 * len(messages)


def test_bfcl_output_mean_and_chain(generators):
    trace = generators["bfcl"](60, 0)
    calls = all_calls(trace)
    assert statistics.fmean(c.output_len for c in calls) == pytest.approx(34, rel=0.2)
    assert min(c.output_len for c in calls) >= bfcl.OUTPUT_MIN
    assert 6 <= len(calls) / len(trace.programs) <= 16
    assert any(c.delay >= bfcl.TOOL_DELAY_S[0] for c in calls)
    for program in trace.programs:
        for prev, call in zip(program.calls, program.calls[1:]):
            assert call.parents == (prev.call_id,)
            assert call.prompt_len > prev.prompt_len


def test_bfcl_programs_with_the_same_docs_share_their_system_prompt(generators):
    trace = generators["bfcl"](60, 0)
    by_key: dict[str, set[int]] = {}
    for program in trace.programs:
        assert program.prefix_key.startswith("bfcl-docs-")
        assert 0 < program.prefix_len < program.calls[0].prompt_len
        by_key.setdefault(program.prefix_key, set()).add(program.prefix_len)
    assert all(len(lengths) == 1 for lengths in by_key.values())  # one key, one length
    assert len(by_key) < len(trace.programs)  # 60 entries, at most 32 distinct doc sets


def test_lats_is_parallel_with_paper_statistics(generators):
    trace = generators["lats"](20, 0)
    calls = all_calls(trace)
    assert len(calls) / 20 == pytest.approx(159.7, rel=0.15)
    assert statistics.fmean(c.prompt_len for c in calls) == pytest.approx(467, rel=0.15)
    assert statistics.fmean(c.output_len for c in calls) == pytest.approx(73, rel=0.15)
    program = trace.programs[0]
    children: dict[str, int] = {}
    for call in program.calls:
        for parent in call.parents:
            children[parent] = children.get(parent, 0) + 1
    assert max(children.values()) >= 2
    assert any(len(call.parents) >= 2 for call in program.calls)


def test_mixed_round_robin(generators):
    trace = generators["mixed"](7, 0)
    assert [p.workload for p in trace.programs] == ["sharegpt", "bfcl", "lats", "sharegpt", "bfcl", "lats", "sharegpt"]
