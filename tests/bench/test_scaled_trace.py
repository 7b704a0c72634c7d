import pytest

from bench.sim.scaled_trace import scale_trace
from bench.sim.trace import Trace, TraceCall, TraceProgram
from bench.sim.workloads import lats


def hand_made_trace():
    calls = (TraceCall("c0", 100, 33), TraceCall("c1", 40, 7, ("c0",), 1.0),
             TraceCall("c2", 25, 19, ("c0",)), TraceCall("c3", 50, 10, ("c1", "c2"), 0.5),
             TraceCall("c4", 9, 9, ("c3",)))
    ids = TraceCall("d0", 12, 30, prompt_token_ids=tuple(range(200, 212)))
    return Trace((TraceProgram("A", 2.0, calls, "test"), TraceProgram("B", 3.5, (ids,), "test")))


def test_scaled_trace_has_the_exact_scaled_lengths_and_caps():
    out = scale_trace(hand_made_trace(), scale=10, max_calls=3, time_scale=2.0)
    a, b = out.programs
    assert [(c.call_id, c.prompt_len, c.output_len, c.parents, c.delay) for c in a.calls] == [
        ("c0", 10, 3, (), 0.0), ("c1", 4, 1, ("c0",), 2.0), ("c2", 2, 1, ("c0",), 0.0)]
    assert (a.arrival, b.arrival) == (4.0, 7.0)
    assert (b.calls[0].prompt_len, b.calls[0].output_len) == (1, 3)
    assert b.calls[0].prompt_token_ids == (200,)


def test_scaled_trace_is_deterministic_and_a_valid_dag():
    trace = lats.generate(3, seed=5, rate=1.0)
    out = scale_trace(trace, scale=16, max_calls=8)
    assert out == scale_trace(trace, scale=16, max_calls=8)
    for original, program in zip(trace.programs, out.programs):
        assert 1 <= len(program.calls) <= 8
        kept = set()
        for call, source in zip(program.calls, original.calls):
            assert set(call.parents) <= kept  # parents come first and are kept
            kept.add(call.call_id)
            assert call.prompt_len == max(1, source.prompt_len // 16) >= 1
            assert call.output_len == max(1, source.output_len // 16) >= 1
    # scale 1 and a large cap give the trace back
    assert scale_trace(trace, scale=1, max_calls=10_000) == trace


@pytest.mark.parametrize("kwargs, field", [(dict(scale=0.5), "scale"), (dict(max_calls=0),
                         "max_calls"), (dict(time_scale=-1.0), "time_scale")])
def test_scaled_trace_rejects_bad_arguments(kwargs, field):
    with pytest.raises(ValueError, match=field):
        scale_trace(hand_made_trace(), **kwargs)


def test_scaled_trace_scales_the_shared_prefix_like_prompts():
    calls = (TraceCall("c0", 100, 8), TraceCall("c1", 64, 8, ("c0",)),
             TraceCall("c2", 40, 8, ("c1",)))
    trace = Trace((TraceProgram("A", 0.0, calls, "test", "tools", 40),
                   TraceProgram("B", 0.0, calls, "test", "tools", 9),
                   TraceProgram("C", 0.0, calls, "test")))
    a, b, c = scale_trace(trace, scale=16, max_calls=2).programs
    assert [call.prompt_len for call in a.calls] == [6, 4]
    assert (a.prefix_key, a.prefix_len) == ("tools", 2)  # floor(40 / 16)
    assert (b.prefix_key, b.prefix_len) == ("tools", 1)  # floor(9 / 16) = 0, kept at 1
    assert (c.prefix_key, c.prefix_len) == (None, 0)
    assert scale_trace(trace, scale=1, max_calls=3) == trace
