import math
import statistics

import pytest

from bench import cli
from bench.analysis.sweep import generate_trace
from bench.sim.workloads import coding
from bench.sim.workloads.__main__ import main as stats_main


@pytest.fixture(scope="module")
def generated():
    return coding.generate_with_stats(300, 0, 1.0)


@pytest.fixture(scope="module")
def trace(generated):
    return generated[0]


@pytest.fixture(scope="module")
def sessions(generated):
    return generated[1]


def by_id(program):
    return {c.call_id: c for c in program.calls}


def is_turn(call, thread="t"):
    return call.call_id.startswith(thread) and not call.call_id.endswith("-compact")


def test_deterministic_per_seed_with_poisson_arrivals():
    a = coding.generate(6, 1, 0.5)
    assert a == coding.generate(6, 1, 0.5)
    assert a == coding.generate(6, 1, 0.5, tokenizer=object())  # accepted, unused
    assert a != coding.generate(6, 2, 0.5)
    assert [p.program_id for p in a.programs] == [f"coding-{i}" for i in range(6)]
    arrivals = [p.arrival for p in a.programs]
    assert arrivals == sorted(arrivals) and arrivals[0] > 0
    assert {p.workload for p in a.programs} == {"coding"}
    with pytest.raises(ValueError, match="num_programs"):
        coding.generate(0, 1, 0.5)


def test_turns_median_near_43_and_heavy_tailed(trace, sessions):
    turns = [s.turns for s in sessions]
    assert [sum(1 for c in p.calls if is_turn(c)) for p in trace.programs] == turns
    assert 38 <= statistics.median(turns) <= 48
    assert max(turns) > 3 * statistics.median(turns)  # lognormal tail
    assert min(turns) >= coding.TURNS_MIN


def test_final_context_median_near_142k(trace, sessions):
    assert 125_000 <= statistics.median(s.final_context for s in sessions) <= 160_000
    for program, s in zip(trace.programs, sessions):
        if s.compactions == 0:  # then the last turn's prompt is the whole history
            last = [c for c in program.calls if is_turn(c)][-1]
            assert last.prompt_len == s.final_context


def test_shared_system_prompt_is_the_prefix_of_every_program(trace):
    assert {(p.prefix_key, p.prefix_len) for p in trace.programs} == {
        (coding.PREFIX_KEY, coding.SYSTEM_PROMPT_TOKENS)}
    assert 8_000 <= coding.SYSTEM_PROMPT_TOKENS <= 12_000
    assert all(c.prompt_len > coding.SYSTEM_PROMPT_TOKENS for p in trace.programs for c in p.calls)


def test_no_call_exceeds_the_context_window(trace):
    calls = [c for p in trace.programs for c in p.calls]
    assert max(c.prompt_len for c in calls) <= coding.PROMPT_CAP
    assert max(c.prompt_len + c.output_len for c in calls) <= coding.MAX_CONTEXT == 131_072


def test_compaction_summarizes_then_restarts_from_system_prompt_and_summary(trace, sessions):
    assert 0.3 <= sum(1 for s in sessions if s.compactions) / len(sessions) <= 0.8
    seen = 0
    for program, s in zip(trace.programs, sessions):
        calls = by_id(program)
        compactions = [c for c in program.calls if c.call_id.endswith("-compact")]
        assert len(compactions) == s.compactions
        for summary_call in compactions:
            turn = calls[summary_call.call_id.removesuffix("-compact")]
            assert turn.parents == (summary_call.call_id,) and turn.delay == 0.0
            assert turn.prompt_len == coding.SYSTEM_PROMPT_TOKENS + summary_call.output_len
            assert turn.segment > summary_call.segment  # a new context: nothing but the prefix shared
            assert coding.SUMMARY_MIN <= summary_call.output_len <= coding.SUMMARY_MAX
            history = summary_call.prompt_len - coding.SUMMARY_INSTRUCTION_TOKENS
            assert history > coding.COMPACT_AT  # it compacts only a history past the threshold
            previous = calls[summary_call.parents[0]]
            assert history > previous.prompt_len + previous.output_len  # the history grew into it
            seen += 1
    assert seen == sum(s.compactions for s in sessions)


def test_main_turns_grow_by_reply_and_tool_result(trace):
    for program in trace.programs[:50]:
        calls = by_id(program)
        for call in program.calls:
            if not is_turn(call) or len(call.parents) != 1 or not is_turn(calls[call.parents[0]]):
                continue
            previous = calls[call.parents[0]]
            tool_result = call.prompt_len - previous.prompt_len - previous.output_len
            assert coding.TOOL_RESULT_MIN <= tool_result <= coding.TOOL_RESULT_MAX


def test_about_44_percent_have_one_subagent_that_joins_back(trace, sessions):
    with_subagent = [p for p in trace.programs if any(c.call_id.startswith("s") for c in p.calls)]
    assert len(with_subagent) == sum(1 for s in sessions if s.subagent_turns)
    assert 0.36 <= len(with_subagent) / len(trace.programs) <= 0.52
    turns_in_parallel = []
    for program in trace.programs:
        calls = by_id(program)
        joins = [c for c in program.calls if len(c.parents) > 1]
        sub = [c for c in program.calls if c.call_id.startswith("s")]
        if not sub:
            assert joins == [] and all(len(c.parents) == 1 for c in program.calls[1:])
            continue
        order = {c.call_id: i for i, c in enumerate(program.calls)}
        assert all(order[p] < order[c.call_id] for c in program.calls for p in c.parents)  # topological
        first, last = sub[0], sub[-1]
        assert first.call_id == "s0" and len(first.parents) == 1 and is_turn(calls[first.parents[0]])
        assert first.prompt_len < coding.SYSTEM_PROMPT_TOKENS + coding.SUBAGENT_TASK_MAX  # a fresh context
        main_segments = {c.segment for c in program.calls if c.call_id.startswith("t")}
        assert first.segment not in main_segments  # its own ids after the system prompt
        assert [c.parents for c in sub[1:]] == [(c.call_id,) for c in sub[:-1]]  # its own chain
        assert len(joins) == 1
        join = joins[0]
        main_parent, sub_parent = join.parents
        assert sub_parent == last.call_id and main_parent.startswith("t")
        assert order[main_parent] >= order[first.parents[0]]  # it joins after its spawn
        turns_in_parallel.append(int(main_parent[1:]) - int(first.parents[0][1:]))
        grown = join.prompt_len - calls[main_parent].prompt_len - calls[main_parent].output_len
        if is_turn(join) and is_turn(calls[main_parent]):
            assert grown >= last.output_len  # the report (plus the main thread's tool result)
        assert coding.REPORT_MIN <= last.output_len <= coding.REPORT_MAX
    assert statistics.median(turns_in_parallel) >= 2  # the main agent goes on meanwhile


def test_tool_delays_lognormal_from_a_second_to_minutes(trace):
    delays = [c.delay for p in trace.programs for c in p.calls if c.delay > 0]
    assert all(coding.TOOL_DELAY_MIN_S <= d <= coding.TOOL_DELAY_MAX_S for d in delays)
    assert coding.TOOL_DELAY_MIN_S == 1.0 and 60 <= coding.TOOL_DELAY_MAX_S <= 600
    assert 3.0 <= statistics.median(delays) <= 5.0
    logs = sorted(math.log(d) for d in delays if d > coding.TOOL_DELAY_MIN_S)
    q1, q3 = logs[len(logs) // 4], logs[3 * len(logs) // 4]
    assert 0.9 <= (q3 - q1) / 1.349 <= 1.3  # interquartile spread of log delay ~ sigma 1.1
    assert max(delays) > 60  # a long tail: minutes-long test runs
    roots = [p.calls[0] for p in trace.programs]
    assert all(c.delay == 0.0 and c.parents == () for c in roots)


def test_replies_are_short(trace):
    outputs = [c.output_len for p in trace.programs for c in p.calls if is_turn(c)]
    assert all(coding.OUTPUT_MIN <= o <= coding.OUTPUT_MAX for o in outputs)
    assert 50 <= statistics.median(outputs) <= 300


def test_registered_as_a_bench_workload():
    assert "coding" in cli.WORKLOADS
    args = cli.build_parser().parse_args(["sim", "--workload", "coding", "--rate", "0.05"])
    assert args.workload == "coding"
    assert generate_trace("coding", 2, 3, 0.05) == coding.generate(2, 3, 0.05)


def test_stats_prints_coding_beside_its_reference(capsys):
    stats_main(["stats", "--workloads", "coding", "--programs", "20"])
    out = capsys.readouterr().out
    assert "| coding | 20 |" in out
    assert "43 (vLLM #57103)" in out and "44% (vLLM #57103)" in out
    with pytest.raises(SystemExit):
        stats_main(["stats", "--workloads", "nope"])
