"""Program arrival processes: when a trace's programs arrive, at a given mean rate.

Every generator draws Poisson arrivals (`bench.sim.trace.poisson_arrivals`); `retime` puts
another process's arrivals in their place at the same mean rate, so a capacity in programs/s
means the same load under every process. Each process is scale-free (its parameters are in
units of the mean gap 1/rate), so a trace drawn at rate 1 and scaled to rate r
(`bench.analysis.capacity.retimed`) is the same process at rate r. `parse_arrivals` reads the
`--arrivals` spelling:

- `poisson`: exponential gaps, coefficient of variation (CV) 1: the generators' own draws,
  left as they are (`retime` returns the trace unchanged), so old traces stay byte for byte.
- `gamma[:CV]`: independent Gamma gaps of shape 1/CV^2 and mean 1/rate (a renewal process;
  CV > 1 is burstier than Poisson, CV < 1 smoother). BurstGPT (Wang et al., 2024, arXiv
  2401.17644) fits Gamma inter-arrival distributions to ChatGPT and GPT-4 traffic of Azure
  OpenAI; the default CV sqrt(2) (shape 0.5) is the Gamma shape of BurstGPT-Perf, the
  generator released with it (github.com/HPMLL/BurstGPT, `RunConfig.gamma_shape`). The
  paper's per-service fitted shapes were not at hand: that they sit near 0.5 is an
  assumption.
- `onoff[:BURST,ON_FRACTION,CYCLE]`: a two-state Markov-modulated Poisson process (MMPP-2).
  In the on state programs arrive at BURST x rate, in the off state at
  rate x (1 - ON_FRACTION x BURST) / (1 - ON_FRACTION) (0 when ON_FRACTION x BURST = 1: a
  pure on-off source), so the mean stays `rate`; the process is on ON_FRACTION of the time,
  and one on-off cycle lasts CYCLE mean gaps on average (CYCLE programs arrive per cycle),
  the on and off periods being exponential. Default 4, 0.2, 100 (bursts at 4x for a fifth of
  the time, carrying 80% of the programs, ~20 bursts per 2,000 programs): an assumption,
  not fitted to a trace.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, replace

from bench.sim.trace import Trace, poisson_arrivals

GAMMA_CV = math.sqrt(2)  # BurstGPT-Perf's Gamma shape 0.5
ONOFF_BURST, ONOFF_ON_FRACTION, ONOFF_CYCLE = 4.0, 0.2, 100.0


def _check_times(n: int, rate: float) -> None:
    if n < 0:
        raise ValueError(f"n: must be >= 0, got {n}")
    if not rate > 0:
        raise ValueError(f"rate: must be > 0, got {rate}")


@dataclass(frozen=True)
class Poisson:
    """Exponential gaps: `poisson_arrivals`."""

    @property
    def spec(self) -> str:
        return "poisson"

    def cv(self) -> float:
        """The coefficient of variation of the gaps."""
        return 1.0

    def times(self, n: int, rate: float, seed: int) -> list[float]:
        return poisson_arrivals(n, rate, seed)


@dataclass(frozen=True)
class GammaArrivals:
    """Independent Gamma gaps with coefficient of variation `cv` (> 0) and mean 1/rate."""

    cv_value: float = GAMMA_CV

    def __post_init__(self) -> None:
        if not (self.cv_value > 0 and math.isfinite(self.cv_value)):
            raise ValueError(f"cv: must be > 0 and finite, got {self.cv_value}")

    @property
    def spec(self) -> str:
        return f"gamma:{self.cv_value:g}"

    def cv(self) -> float:
        return self.cv_value

    def times(self, n: int, rate: float, seed: int) -> list[float]:
        """`n` arrival times (cumulative gaps from 0; all 0 at an infinite rate), drawn from
        a `random.Random` of `seed` and this spec."""
        _check_times(n, rate)
        if math.isinf(rate):
            return [0.0] * n
        shape = 1.0 / (self.cv_value * self.cv_value)
        scale = 1.0 / (rate * shape)
        rng = random.Random(f"{self.spec}/{seed}")
        t, out = 0.0, []
        for _ in range(n):
            t += rng.gammavariate(shape, scale)
            out.append(t)
        return out


@dataclass(frozen=True)
class OnOff:
    """MMPP-2: arrivals at `burst` x rate while on (`on_fraction` of the time), at the rate
    that keeps the mean while off; `cycle` programs arrive per on-off cycle on average."""

    burst: float = ONOFF_BURST
    on_fraction: float = ONOFF_ON_FRACTION
    cycle: float = ONOFF_CYCLE

    def __post_init__(self) -> None:
        if not (self.burst > 1 and math.isfinite(self.burst)):
            raise ValueError(f"burst: must be > 1 and finite, got {self.burst}")
        if not 0 < self.on_fraction < 1:
            raise ValueError(f"on_fraction: must be in (0, 1), got {self.on_fraction}")
        if self.on_fraction * self.burst > 1 + 1e-12:
            raise ValueError(f"on_fraction: on_fraction x burst must be <= 1 (the on state "
                             f"carries at most every program), got {self.on_fraction} x "
                             f"{self.burst:g}")
        if not (self.cycle > 0 and math.isfinite(self.cycle)):
            raise ValueError(f"cycle: must be > 0 and finite, got {self.cycle}")

    @property
    def spec(self) -> str:
        return f"onoff:{self.burst:g},{self.on_fraction:g},{self.cycle:g}"

    def rates(self, rate: float) -> tuple[float, float]:
        """(on rate, off rate) at mean `rate`."""
        off = rate * max(0.0, 1 - self.on_fraction * self.burst) / (1 - self.on_fraction)
        return self.burst * rate, off

    def mean_periods(self, rate: float) -> tuple[float, float]:
        """(mean on period, mean off period) in seconds at mean `rate`."""
        return (self.on_fraction * self.cycle / rate,
                (1 - self.on_fraction) * self.cycle / rate)

    def cv(self) -> float:
        """The gaps' CV at stationarity, from the MMPP's moments: E[X^k] = k! phi M^-k 1 with
        M = -D0 and phi the phase at an arrival (independent of the rate)."""
        (l_on, l_off), (t_on, t_off) = self.rates(1.0), self.mean_periods(1.0)
        a, b = 1 / t_on, 1 / t_off
        det = (l_on + a) * (l_off + b) - a * b

        def solve(v: tuple[float, float]) -> tuple[float, float]:  # M^-1 v
            return (((l_off + b) * v[0] + a * v[1]) / det, (b * v[0] + (l_on + a) * v[1]) / det)

        phi = (self.on_fraction * l_on, (1 - self.on_fraction) * l_off)  # sums to the rate, 1
        m1 = solve((1.0, 1.0))
        m2 = solve(m1)
        mean = phi[0] * m1[0] + phi[1] * m1[1]
        second = 2 * (phi[0] * m2[0] + phi[1] * m2[1])
        return math.sqrt(second / (mean * mean) - 1)

    def times(self, n: int, rate: float, seed: int) -> list[float]:
        """`n` arrival times from 0, the first state drawn from the stationary one (on with
        probability `on_fraction`); all 0 at an infinite rate."""
        _check_times(n, rate)
        if math.isinf(rate):
            return [0.0] * n
        rng = random.Random(f"{self.spec}/{seed}")
        (l_on, l_off), (t_on, t_off) = self.rates(rate), self.mean_periods(rate)
        on = rng.random() < self.on_fraction
        t = 0.0
        switch = rng.expovariate(1 / (t_on if on else t_off))
        out: list[float] = []
        while len(out) < n:
            current = l_on if on else l_off
            gap = rng.expovariate(current) if current > 0 else math.inf
            if t + gap < switch:
                t += gap
                out.append(t)
            else:  # memoryless: the state changes, the next gap is drawn afresh
                t, on = switch, not on
                switch = t + rng.expovariate(1 / (t_on if on else t_off))
        return out


ArrivalProcess = Poisson | GammaArrivals | OnOff
POISSON = Poisson()
KINDS = ("poisson", "gamma", "onoff")


def parse_arrivals(text: str) -> ArrivalProcess:
    """`poisson`, `gamma[:CV]` or `onoff[:BURST,ON_FRACTION,CYCLE]` (the module docstring);
    ValueError naming the field otherwise."""
    kind, sep, args = text.strip().partition(":")
    if kind not in KINDS:
        raise ValueError(f"arrivals: must be one of {', '.join(KINDS)} (gamma:CV, "
                         f"onoff:BURST,ON_FRACTION,CYCLE), got {text!r}")
    values = _numbers(args, kind) if sep else []
    if kind == "poisson":
        if sep:
            raise ValueError(f"arrivals: poisson takes no parameters, got {text!r}")
        return POISSON
    if kind == "gamma":
        if not sep:
            return GammaArrivals()
        if len(values) != 1:
            raise ValueError(f"arrivals: gamma takes one parameter (CV), got {text!r}")
        return GammaArrivals(values[0])
    if len(values) not in (0, 3):
        raise ValueError(f"arrivals: onoff takes three parameters (BURST,ON_FRACTION,CYCLE), "
                         f"got {text!r}")
    return OnOff(*values) if values else OnOff()


def _numbers(args: str, kind: str) -> list[float]:
    try:
        return [float(v) for v in args.split(",")]
    except ValueError:
        raise ValueError(f"arrivals: {kind}'s parameters must be numbers, got {args!r}") from None


def retime(trace: Trace, process: ArrivalProcess, rate: float, seed: int) -> Trace:
    """`trace` (programs in arrival order) with arrivals drawn from `process` at mean `rate`
    with `seed`; under `POISSON` the trace itself (the generator's draws)."""
    if isinstance(process, Poisson):
        return trace
    times = process.times(len(trace.programs), rate, seed)
    return Trace(tuple(replace(p, arrival=t) for p, t in zip(trace.programs, times)))
