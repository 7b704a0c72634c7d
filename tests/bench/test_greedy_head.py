"""`bench.studies.greedy_head`: its alternating timer and its argument checks (the study itself
loads SmolLM2 and runs for a minute: not a unit test)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from bench.studies.greedy_head import AlternatingScreen, main, time_alternately


def test_each_way_is_timed_on_every_step_every_round():
    calls = []

    def way(name):
        def run(hidden):
            calls.append((name, hidden.shape[0]))
            return hidden.argmax(1).tolist()
        return run

    kept = [torch.randn(3, 4), torch.randn(5, 4)]
    seconds = time_alternately({"a": way("a"), "b": way("b")}, kept, rounds=2)
    assert {name: len(s) for name, s in seconds.items()} == {"a": 4, "b": 4}
    assert calls == [("a", 3), ("b", 3), ("a", 5), ("b", 5),  # round 0: a first
                     ("b", 3), ("a", 3), ("b", 5), ("a", 5)]  # round 1: b first


def test_ways_that_disagree_are_an_error():
    with pytest.raises(AssertionError, match="disagree"):
        time_alternately({"a": lambda h: [0], "b": lambda h: [1]}, [torch.zeros(1, 2)], 1)


@pytest.mark.parametrize("flag", ["--rounds", "--steps", "--min-rows", "--tokens", "--num"])
def test_counts_below_one_are_refused_by_name(flag, capsys):
    with pytest.raises(SystemExit):
        main([flag, "0"])
    assert f"{flag} must be at least 1" in capsys.readouterr().err


class _Runner:
    """A stand-in runner: records whether the screen was on at each step."""

    def __init__(self) -> None:
        self.greedy_screen = "screen"
        self.screen_at_step: list[bool] = []

    def execute(self, plan):
        self.screen_at_step.append(self.greedy_screen is not None)
        return "result"


def _plan(decodes: int, prefills: int = 0):
    chunks = [SimpleNamespace(is_decode=True)] * decodes
    return SimpleNamespace(chunks=chunks + [SimpleNamespace(is_decode=False)] * prefills)


def test_alternate_steps_run_with_the_screen_on_and_off():
    runner = _Runner()
    alternating = AlternatingScreen(runner, min_rows=2)
    plans = [_plan(2, prefills=1), _plan(2), _plan(3), _plan(1), _plan(2), _plan(4)]
    assert [alternating.execute(p) for p in plans] == ["result"] * 6
    assert runner.screen_at_step == [True, False, True, False, True, False]
    assert runner.greedy_screen == "screen"  # restored after each step
    # Kept: decode-only steps of 2+ rows but the first (step 1): steps 2, 4 (on) and 5 (off).
    assert len(alternating.seconds[True]) == 2 and len(alternating.seconds[False]) == 1
