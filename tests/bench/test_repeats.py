"""bench.support.repeats: which side runs first in a repeat, and the spread of the ratios."""

import pytest

from bench.support.repeats import alternate, spread_text


def test_the_side_that_runs_first_alternates():
    assert alternate(0, ["a1", "a2"], ["h"]) == ["a1", "a2", "h"]
    assert alternate(1, ["a1", "a2"], ["h"]) == ["h", "a1", "a2"]
    assert alternate(2, ["a1"], ["h8", "h32"]) == ["a1", "h8", "h32"]


def test_spread_text_lists_every_repeat_then_min_median_max():
    assert spread_text([2.65, 2.45, 3.0]) == \
        "2.65x, 2.45x, 3.00x: min 2.45x / median 2.65x / max 3.00x"


def test_spread_of_nothing_is_refused():
    with pytest.raises(ValueError, match="ratios"):
        spread_text([])
