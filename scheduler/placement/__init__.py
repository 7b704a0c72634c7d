"""Placement policies of the multi-engine router and simulator, one file each; this is the
one place they are registered.

| policy | a call goes to |
| --- | --- |
| agentix | first call: the least expected work before its first token (queued prefill + its own after the hit); later: its history |
| cutoff | prompt <= cutoff (2,048): the least-loaded replica; longer: its program's pin |
| round_robin | the next healthy replica by index, in turn |
| least_loaded | the replica with the fewest `load_tokens` |
| pinned | its program's pin (session affinity) |
| prefix_aware | the replica with the longest expected prefix hit, then the least loaded |

Load is `ReplicaLoad.load_tokens`: what a replica reports in EngineStats as its running
calls' tokens (their KV) plus its queued calls' tokens still to compute. A pin is set at a
program's first call to the least-loaded healthy replica and moves when that replica is lost
or unhealthy (`pins.py`). Only healthy replicas are chosen; none healthy is a ValueError.
Ties go to the lowest replica index; everything is deterministic. `agentix`, the queue-priced
rule, is the default (`DEFAULT_PLACEMENT`); `cutoff` is the paper's rule, kept for comparison.

A new policy is one `Placement` subclass in one new file, added to `PLACEMENTS` below; code
that only needs to run one can pass the class itself to `make_placement`.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

from scheduler.placement.adaptive_cutoff import ADAPTIVE_OPTIONS, DEFAULT_CUTOFF, AdaptiveCutoff
from scheduler.placement.base import (CallOutcome, Placement, PlacementRequest, ReplicaLoad,
                                      healthy, least_loaded)
from scheduler.placement.cutoff_rule import CutoffPlacement
from scheduler.placement.least_loaded import LeastLoadedPlacement
from scheduler.placement.pinned import PinnedPlacement
from scheduler.placement.prefix_aware import PrefixAwarePlacement
from scheduler.placement.queue_priced import QueuePricedPlacement
from scheduler.placement.round_robin import RoundRobinPlacement

PLACEMENTS = MappingProxyType({p.name: p for p in (
    QueuePricedPlacement, CutoffPlacement, RoundRobinPlacement, LeastLoadedPlacement,
    PinnedPlacement, PrefixAwarePlacement)})

PlacementSpec = str | type[Placement]

# What the router and the multi-engine simulator use when none is named: the queue-priced
# placement, the best when replicas differ; when they are alike it ties prefix_aware's
# capacity (on mixed on the median of three seeds; on one of them a rate step behind:
# bench/notes/2026-12-01-load-balancer.md, "Session 13: later calls follow their history",
# "Session 14: mixed on three seeds").
DEFAULT_PLACEMENT = "agentix"


def _check_options(policy: str, options: dict[str, Any], allowed: tuple[str, ...],
                   why: str = "") -> None:
    bad = sorted(set(options) - set(allowed))
    if bad:
        raise ValueError(f"placement {policy}: unknown option(s) {', '.join(bad)}{why}; "
                         f"it takes {list(allowed) or 'none'}")


def parse_option(text: str) -> tuple[str, int | float | str]:
    """A placement option from its command-line form NAME=VALUE: the value an int, else a
    float, else the text (ValueError when there is no NAME= part)."""
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise ValueError(f"expected NAME=VALUE, got {text!r}")
    for kind in (int, float):
        try:
            return name, kind(value)
        except ValueError:
            pass
    return name, value


def make_placement(name: PlacementSpec, cutoff: int | str = DEFAULT_CUTOFF,
                   **options: Any) -> Placement:
    """A fresh placement from a registered name (or a Placement class).

    `cutoff` (a non-negative int, or "auto" for the adaptive cutoff of `adaptive_cutoff.py`)
    is used by `cutoff` only, validated for every policy; with "auto", `options` are the
    `AdaptiveCutoff` keywords. Other policies take the options their class lists in
    `options` (`prefix_aware`: blocks_per_replica, max_load_gap; `agentix`: load_weight,
    queue_weight, memory_weight, new_program_weight, move_weight).
    ValueError names a bad
    name, cutoff or option.
    """
    if isinstance(name, type) and issubclass(name, Placement):
        cls = name
    elif isinstance(name, str) and name in PLACEMENTS:
        cls = PLACEMENTS[name]
    else:
        raise ValueError(f"placement must be one of {sorted(PLACEMENTS)} or a Placement "
                         f"class, got {name!r}")
    auto = cutoff == "auto"
    if not auto and (isinstance(cutoff, bool) or not isinstance(cutoff, int) or cutoff < 0):
        raise ValueError(f"placement: cutoff must be a non-negative int or 'auto', "
                         f"got {cutoff!r}")
    try:
        if cls is CutoffPlacement:
            if not auto:
                _check_options(cls.name, options, (), " (adaptive options need cutoff='auto')")
                return CutoffPlacement(cutoff)
            _check_options(cls.name, options, ADAPTIVE_OPTIONS)
            return CutoffPlacement(AdaptiveCutoff(**options))
        _check_options(cls.name or cls.__name__, options, cls.options)
        return cls(**options)
    except TypeError as exc:   # an option of the wrong type
        raise ValueError(f"placement {cls.name or cls.__name__}: {exc}") from exc


__all__ = ["ADAPTIVE_OPTIONS", "DEFAULT_CUTOFF", "DEFAULT_PLACEMENT", "PLACEMENTS",
           "AdaptiveCutoff", "CallOutcome", "CutoffPlacement", "LeastLoadedPlacement",
           "PinnedPlacement", "Placement", "PlacementRequest", "PlacementSpec",
           "PrefixAwarePlacement", "QueuePricedPlacement", "ReplicaLoad", "RoundRobinPlacement",
           "healthy", "least_loaded", "make_placement", "parse_option"]
