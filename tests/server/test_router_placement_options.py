"""A router's placement from its name, cutoff and options (`--placement-option`), as
`agentix router` and `serve --replicas` build it; no server is started."""

from __future__ import annotations

import pytest

from scheduler.placement import QueuePricedPlacement, parse_option
from server.router.app import RouterOptions, make_placement


def test_options_reach_the_placement():
    placement = make_placement("agentix", 2048, (("new_program_weight", 0),
                                                 ("memory_weight", 0.5)))
    assert isinstance(placement, QueuePricedPlacement)
    assert (placement.new_program_weight, placement.memory_weight) == (0.0, 0.5)
    assert make_placement("agentix", 2048).new_program_weight == "auto"


def test_bad_options_are_refused_with_their_name():
    with pytest.raises(ValueError, match="unknown option"):
        make_placement("pinned", 2048, (("queue_weight", 1),))
    with pytest.raises(ValueError, match="queue_weight must be a number >= 0"):
        make_placement("agentix", 2048, (("queue_weight", "x"),))
    with pytest.raises(ValueError, match="only with a placement name"):
        make_placement(QueuePricedPlacement(), 2048, (("queue_weight", 1),))


@pytest.mark.parametrize("text, parsed", [("a=1", ("a", 1)), ("a=0.5", ("a", 0.5)),
                                          ("a=auto", ("a", "auto")), ("a=", ("a", ""))])
def test_parse_option(text, parsed):
    assert parse_option(text) == parsed


@pytest.mark.parametrize("text", ["a", "=1", ""])
def test_parse_option_needs_a_name_and_an_equals_sign(text):
    with pytest.raises(ValueError, match="expected NAME=VALUE"):
        parse_option(text)


def test_router_options_keep_the_pairs():
    options = RouterOptions(replicas=("127.0.0.1:1",), placement_options=(("queue_weight", 0),))
    assert options.placement_options == (("queue_weight", 0),)
