"""The collector thresholds and frozen objects inside and after `quiet_collector`."""

import gc
import weakref

import pytest

from bench.sim.quiet_collector import YOUNG_THRESHOLD, quiet_collector


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def test_inside_the_young_threshold_is_raised_and_live_objects_are_frozen():
    before = gc.get_threshold()
    with quiet_collector():
        assert gc.get_threshold() == (YOUNG_THRESHOLD, *before[1:])
        assert gc.get_freeze_count() > 0
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_thresholds_and_frozen_objects_are_restored_when_the_body_raises():
    before = gc.get_threshold()
    with pytest.raises(RuntimeError, match="boom"):
        with quiet_collector():
            raise RuntimeError("boom")
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_a_cycle_made_inside_is_still_collected():
    with quiet_collector():
        a, b = _Node(), _Node()
        a.other, b.other = b, a
        watch = weakref.ref(a)
        del a, b
        gc.collect()
        assert watch() is None


def test_a_cycle_alive_at_entry_is_collected_after_exit():
    a, b = _Node(), _Node()
    a.other, b.other = b, a
    watch = weakref.ref(a)
    with quiet_collector():
        del a, b
        gc.collect()  # frozen: out of the collector's reach
        assert watch() is not None
    gc.collect()
    assert watch() is None
