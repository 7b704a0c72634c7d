import math
import statistics

import pytest

from bench.sim.trace import Trace, TraceCall, TraceProgram, load_trace, poisson_arrivals, save_trace


def make_call(call_id="c0", prompt_len=10, output_len=5, parents=(), delay=0.0, prompt_token_ids=None):
    return TraceCall(call_id, prompt_len, output_len, tuple(parents), delay, prompt_token_ids)


def make_program(calls=None, program_id="p0", arrival=0.0, workload="w"):
    return TraceProgram(program_id, arrival, tuple(calls or [make_call()]), workload)


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"prompt_len": 0}, "prompt_len"),
        ({"output_len": 0}, "output_len"),
        ({"delay": -0.1}, "delay"),
        ({"prompt_len": 3, "prompt_token_ids": (1, 2)}, "prompt_token_ids"),
    ],
)
def test_call_validation_names_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        make_call(**kwargs)


def test_program_validation_names_field():
    with pytest.raises(ValueError, match="arrival"):
        make_program(arrival=-1.0)
    with pytest.raises(ValueError, match="calls"):
        make_program([make_call("a"), make_call("a")])
    with pytest.raises(ValueError, match="parents"):
        make_program([make_call("a", parents=("b",)), make_call("b")])
    with pytest.raises(ValueError, match="parents"):
        make_program([make_call("a", parents=("a",))])
    with pytest.raises(ValueError, match="programs"):
        Trace((make_program(), make_program()))


def test_shared_prefix_needs_a_key_and_fits_every_prompt():
    calls = (make_call("a", 10), make_call("b", 6, 5, ("a",)))
    assert TraceProgram("p", 0.0, calls, "w", "docs", 6).prefix_len == 6
    for key, length in (("docs", 7), (None, 3), ("docs", 0), ("docs", -1)):
        with pytest.raises(ValueError, match="prefix_len"):
            TraceProgram("p", 0.0, calls, "w", key, length)


def test_json_round_trip_is_exact(tmp_path):
    trace = Trace(
        (
            make_program(
                [make_call("a", 3, 7, prompt_token_ids=(1, 2, 3)), make_call("b", 5, 1, ("a",), 0.123456789),
                 TraceCall("c", 4, 1, ("b",), segment=2)],
                "p0",
                0.1 + 0.2,
            ),
            make_program([make_call("x"), make_call("y"), make_call("z", parents=("x", "y"))], "p1", 2.5, "lats"),
            TraceProgram("p2", 3.0, (make_call("s", 12),), "bfcl", "docs-1", 8),
        )
    )
    path = tmp_path / "t.json"
    save_trace(trace, path)
    assert load_trace(path) == trace


def test_poisson_arrivals():
    a = poisson_arrivals(20000, 4.0, seed=7)
    assert a == poisson_arrivals(20000, 4.0, seed=7)
    assert a != poisson_arrivals(20000, 4.0, seed=8)
    assert a[0] > 0 and all(x < y for x, y in zip(a, a[1:]))
    gaps = [a[0]] + [y - x for x, y in zip(a, a[1:])]
    assert statistics.fmean(gaps) == pytest.approx(0.25, rel=0.03)
    assert poisson_arrivals(3, math.inf, seed=1) == [0.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="rate"):
        poisson_arrivals(3, 0.0, seed=1)
