"""bench.studies.detok_cost on SmolLM2: the streamed text each push releases is pushed for every
call and step, and detokenization costs less than the step it follows (slow: loads the
real model)."""

from __future__ import annotations

import pytest

from bench.studies.detok_cost import measure


@pytest.mark.slow
def test_detokenization_is_timed_beside_the_decode_steps():
    figures = measure(batch=2, steps=3, threads=1)
    assert set(figures) == {"step_seconds", "detok_seconds", "detok_seconds_16_stops"}
    assert 0 < figures["detok_seconds"] < figures["step_seconds"]
    assert 0 < figures["detok_seconds_16_stops"] < figures["step_seconds"]
