"""The adaptive cutoff of the `cutoff` placement (`--cutoff auto`).

`cutoff` sends a call of at most `cutoff` prompt tokens to the least-loaded replica and a
longer one to its program's pinned replica. A short call that lands away from its pinned
replica trades cache hits for queue time; this class watches both sides of that trade in the
outcomes the replicas report (`usage.cached_tokens`, `usage.queue_seconds`) and moves the cutoff.

The rule, per finished call (`observe`), given its program's pinned replica P:

- every outcome updates the recent queue time of the replica that ran it:
  `queue[r] <- queue[r] + queue_alpha * (queue_seconds - queue[r])` (the first one sets it);
- a call that ran on P (a home call) sets the program's home hit ratio
  `home[program] = cached_tokens / prompt_tokens` (its last call at P);
- a call that ran elsewhere (an away call) whose program has a home ratio and whose P has a
  recent queue time (both taken before this outcome) is scored:
    lost   = max(0, home[program] * prompt_tokens - cached_tokens) / prefill_tokens_per_second
             * (1 + batch_calls)
             (the prefill seconds its cache misses cost, against what P would have served,
             paid by itself and by every call in the running batch of the replica that
             computed them: iteration-level batching stalls the batch for a prefill),
    gained = queue[P] - queue_seconds  (the queue seconds it saved; negative when it waited
             longer than calls at P do).
- after every `window` scored away calls, with L and G the mean lost and gained seconds over
  them and `threshold = max(min_seconds, margin * (L + |G|))`:
    L - G >  threshold: cutoff down one step (fewer calls go away),
    G - L >  threshold: cutoff up one step (more calls go to the least-loaded replica),
    otherwise it stays; the window then starts afresh.

A step is a factor of `step` (2^(1/4): four steps double it); the cutoff is
`round(initial * step**k)` clamped to [low, high] (k stops moving at a bound). It moves at
most once per `window` scored observations. Calls without a pin (None) only feed queue times.
Defaults: initial 2,048, bounds [256, 16,384], window 8, margin 0.25, min_seconds 0.005,
prefill 10,000 tokens/s, queue_alpha 0.25. State is O(#programs + #replicas); `observe` O(1).
"""

from __future__ import annotations

from scheduler.placement.base import CallOutcome

DEFAULT_CUTOFF = 2048
# The keyword options of `AdaptiveCutoff` (what `make_placement("cutoff", cutoff="auto")`
# accepts).
ADAPTIVE_OPTIONS = ("initial", "low", "high", "step", "window", "margin", "min_seconds",
                    "prefill_tokens_per_second", "queue_alpha")


class AdaptiveCutoff:
    """The cutoff as a moving estimate (see the module for the rule and its constants)."""

    def __init__(self, initial: int = DEFAULT_CUTOFF, *, low: int = 256, high: int = 16384,
                 step: float = 2 ** 0.25, window: int = 8, margin: float = 0.25,
                 min_seconds: float = 0.005, prefill_tokens_per_second: float = 10_000.0,
                 queue_alpha: float = 0.25) -> None:
        for key, value in (("low", low), ("high", high), ("initial", initial),
                           ("window", window)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"cutoff: {key} must be a positive int, got {value!r}")
        if not low <= initial <= high:
            raise ValueError(f"cutoff: initial {initial} must lie in [low={low}, high={high}]")
        if not step > 1:
            raise ValueError(f"cutoff: step must be > 1, got {step!r}")
        if not margin >= 0 or not min_seconds >= 0:
            raise ValueError(f"cutoff: margin and min_seconds must be >= 0, "
                             f"got {margin!r}, {min_seconds!r}")
        if not prefill_tokens_per_second > 0:
            raise ValueError(f"cutoff: prefill_tokens_per_second must be > 0, "
                             f"got {prefill_tokens_per_second!r}")
        if not 0 < queue_alpha <= 1:
            raise ValueError(f"cutoff: queue_alpha must be in (0, 1], got {queue_alpha!r}")
        self.initial, self.low, self.high, self.step = initial, low, high, step
        self.window, self.margin, self.min_seconds = window, margin, min_seconds
        self.prefill_tokens_per_second, self.queue_alpha = prefill_tokens_per_second, queue_alpha
        self._k = 0
        self._home: dict[str, float] = {}      # program -> cached fraction of its last home call
        self._queue: dict[int, float] = {}     # replica -> recent queue seconds
        self._lost = 0.0
        self._gained = 0.0
        self._scored = 0
        self.last_decision = ""                # "down", "up", "stay" after each window
        self.last_lost_seconds = 0.0           # the means L and G of the last window
        self.last_gained_seconds = 0.0

    def _value(self, k: int) -> int:
        return min(self.high, max(self.low, round(self.initial * self.step ** k)))

    @property
    def cutoff(self) -> int:
        return self._value(self._k)

    def queue_seconds(self, replica: int) -> float | None:
        """The replica's recent queue time (None before its first outcome)."""
        return self._queue.get(replica)

    def home_ratio(self, program_id: str) -> float | None:
        return self._home.get(program_id)

    def observe(self, program_id: str, pinned: int | None, outcome: CallOutcome) -> int:
        """Take one finished call's outcome (its program pinned to `pinned`); returns the
        cutoff after it."""
        home_queue = None if pinned is None else self._queue.get(pinned)
        old = self._queue.get(outcome.replica)
        self._queue[outcome.replica] = (outcome.queue_seconds if old is None else
                                        old + self.queue_alpha * (outcome.queue_seconds - old))
        if pinned is None:
            return self.cutoff
        prompt = max(0, outcome.prompt_tokens)
        cached = min(max(0, outcome.cached_tokens), prompt)
        if outcome.replica == pinned:
            if prompt > 0:
                self._home[program_id] = cached / prompt
            return self.cutoff
        ratio = self._home.get(program_id)
        if ratio is None or home_queue is None:
            return self.cutoff
        stalled = 1 + max(0, outcome.batch_calls)
        self._lost += (max(0.0, ratio * prompt - cached) / self.prefill_tokens_per_second
                       * stalled)
        self._gained += home_queue - outcome.queue_seconds
        self._scored += 1
        if self._scored >= self.window:
            self._decide()
        return self.cutoff

    def _decide(self) -> None:
        lost, gained = self._lost / self._scored, self._gained / self._scored
        threshold = max(self.min_seconds, self.margin * (lost + abs(gained)))
        if lost - gained > threshold:
            self.last_decision = "down"
            if self.cutoff > self.low:
                self._k -= 1
        elif gained - lost > threshold:
            self.last_decision = "up"
            if self.cutoff < self.high:
                self._k += 1
        else:
            self.last_decision = "stay"
        self.last_lost_seconds, self.last_gained_seconds = lost, gained
        self._lost, self._gained, self._scored = 0.0, 0.0, 0

    def program_ended(self, program_id: str) -> None:
        self._home.pop(program_id, None)

    def replica_lost(self, replica: int) -> None:
        self._queue.pop(replica, None)
