import argparse
import math
import statistics

import pytest

from bench.analysis.steady_state import TracePrefixes
from bench.cli import build_parser
from bench.sim.arrivals import (POISSON, GammaArrivals, OnOff, parse_arrivals, retime)
from bench.sim.trace import poisson_arrivals
from bench.sim.workloads import lats

N = 100_000  # gaps per statistical check


def gaps(times):
    return [b - a for a, b in zip([0.0] + times[:-1], times)]


def test_parse_spellings():
    assert parse_arrivals("poisson") is POISSON
    assert parse_arrivals("gamma") == GammaArrivals(math.sqrt(2))
    assert parse_arrivals("gamma:3") == GammaArrivals(3.0)
    assert parse_arrivals("onoff") == OnOff(4.0, 0.2, 100.0)
    assert parse_arrivals("onoff:2,0.3,50") == OnOff(2.0, 0.3, 50.0)
    assert parse_arrivals("onoff:2,0.3,50").spec == "onoff:2,0.3,50"
    assert parse_arrivals(parse_arrivals("gamma:2.5").spec) == GammaArrivals(2.5)


@pytest.mark.parametrize("text, field", [
    ("weibull", "arrivals"), ("poisson:1", "arrivals"), ("gamma:1,2", "arrivals"),
    ("gamma:x", "arrivals"), ("gamma:0", "cv"), ("gamma:-1", "cv"), ("gamma:inf", "cv"),
    ("onoff:4,0.2", "arrivals"), ("onoff:1,0.2,100", "burst"), ("onoff:4,0,100", "on_fraction"),
    ("onoff:4,1,100", "on_fraction"), ("onoff:4,0.3,100", "on_fraction"),
    ("onoff:4,0.2,0", "cycle"),
])
def test_bad_specs_name_the_field(text, field):
    with pytest.raises(ValueError, match=rf"^{field}:"):
        parse_arrivals(text)


@pytest.mark.parametrize("command", ["sim", "sweep", "capacity"])
def test_cli_refuses_a_bad_process_with_a_usage_error(command, capsys):
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args([command, "--workload", "lats", "--arrivals", "gamma:-2"])
    assert exc.value.code == 2
    assert "--arrivals: cv: must be > 0" in capsys.readouterr().err


def test_cli_parses_a_process_for_each_command():
    for command in ("sim", "sweep", "capacity"):
        args = build_parser().parse_args([command, "--workload", "lats", "--arrivals", "onoff"])
        assert args.arrivals == OnOff()
    assert build_parser().parse_args(["sim", "--workload", "lats"]).arrivals is POISSON


def test_poisson_keeps_the_generators_trace():
    trace = lats.generate(3, seed=5, rate=2.0)
    assert retime(trace, POISSON, 2.0, 5) is trace
    assert POISSON.times(10, 2.0, 5) == poisson_arrivals(10, 2.0, 5)


@pytest.mark.parametrize("process", [GammaArrivals(2.0), OnOff()])
def test_times_are_seeded_prefix_consistent_and_scale_free(process):
    long = process.times(50, 1.0, seed=3)
    assert long == process.times(50, 1.0, seed=3)
    assert long != process.times(50, 1.0, seed=4)
    assert process.times(20, 1.0, seed=3) == long[:20]  # TracePrefixes relies on this
    assert all(b > a for a, b in zip(long, long[1:]))
    at_four = process.times(50, 4.0, seed=3)
    assert all(math.isclose(x / 4, y, rel_tol=1e-9) for x, y in zip(long, at_four))
    assert process.times(3, math.inf, seed=3) == [0.0, 0.0, 0.0]


@pytest.mark.parametrize("cv", [0.5, math.sqrt(2), 3.0])
def test_gamma_mean_rate_and_cv(cv):
    """Independent gaps: the sample mean's relative standard error is cv / sqrt(N) (at most
    0.95% here), the sample CV's about cv x sqrt((1 + 1.5 cv^2) / N) (Gamma's kurtosis); the
    bounds are 5 standard errors."""
    sample = gaps(GammaArrivals(cv).times(N, 2.0, seed=11))
    mean = statistics.fmean(sample)
    assert abs(mean * 2.0 - 1) < 5 * cv / math.sqrt(N)
    cv_hat = statistics.pstdev(sample) / mean
    assert abs(cv_hat - cv) < 5 * cv * math.sqrt((1 + 1.5 * cv * cv) / N)


def test_onoff_mean_rate_and_cv():
    """The count's index of dispersion is 1 + 2 (l_on - l_off)^2 a b / ((a + b)^3 rate)
    (a, b: the switching rates), so the mean rate's relative error over N arrivals is
    sqrt(IDC / N); the gaps' CV is checked against the MMPP's moments (`OnOff.cv`) within
    10% (gaps are correlated: no closed-form error)."""
    process = OnOff()
    (l_on, l_off), (t_on, t_off) = process.rates(1.0), process.mean_periods(1.0)
    a, b = 1 / t_on, 1 / t_off
    idc = 1 + 2 * (l_on - l_off) ** 2 * a * b / (a + b) ** 3
    times = process.times(N, 1.0, seed=2)
    rate = N / times[-1]
    assert abs(rate - 1) < 4 * math.sqrt(idc / N)
    sample = gaps(times)
    assert abs(statistics.pstdev(sample) / statistics.fmean(sample) - process.cv()) < \
        0.1 * process.cv()
    assert process.cv() == pytest.approx(2.2881, abs=1e-4)


def test_onoff_keeps_the_mean_rate_in_theory():
    process = OnOff(3.0, 0.25, 40.0)
    l_on, l_off = process.rates(2.0)
    assert process.on_fraction * l_on + (1 - process.on_fraction) * l_off == pytest.approx(2.0)
    assert OnOff(4.0, 0.25, 10.0).rates(1.0) == (4.0, 0.0)  # a pure on-off source
    assert OnOff(2.0, 0.3, 20.0).cv() == pytest.approx(1.2731, abs=1e-4)


def test_retime_and_steady_prefixes_use_the_process():
    trace = lats.generate(4, seed=1, rate=1.0)
    gamma = GammaArrivals(2.0)
    timed = retime(trace, gamma, 1.0, 1)
    assert [p.arrival for p in timed.programs] == gamma.times(4, 1.0, 1)
    assert [p.calls for p in timed.programs] == [p.calls for p in trace.programs]
    prefixes = TracePrefixes("lats", 1, gamma)
    assert prefixes.first(4) == timed
    assert prefixes.first(2).programs == timed.programs[:2]


def test_arrivals_argument_type_is_an_argparse_error():
    from bench.cli import _arrivals

    with pytest.raises(argparse.ArgumentTypeError, match="burst"):
        _arrivals("onoff:0.5,0.2,10")
