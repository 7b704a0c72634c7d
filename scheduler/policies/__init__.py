"""Scheduling policies, one file each; this is the one place they are registered.

| policy | entry value of a new call | program service after a call |
| --- | --- | --- |
| fcfs | one queue, arrival order | sum |
| las | 0 (request-level: every call starts fresh) | sum |
| mlfq | the queue whose quantum covers the call's first step (FastServe skip-join) | sum |
| plas | the program's summed service | sum |
| atlas | the program's critical path | max(service, start value + call service) |
| pfcfs | one queue, in program start order, then call arrival | sum |
| gittins | the Gittins index of its attained service, learnt (pfcfs until learnt) | as atlas |
| oracle | the program's remaining work (told, not learnt); never demoted | sum |

A new policy is one `Policy` subclass in one new file, added to `POLICIES` below; code that
only needs to run one (tests, experiments) can pass the class itself wherever a policy name
is accepted (`EngineConfig.policy`, `make_policy`). `DEFAULT_POLICY` is the engine's default.
"""

from __future__ import annotations

from types import MappingProxyType

from scheduler.policies.atlas import ATLASPolicy
from scheduler.policies.base import Policy, Retention
from scheduler.policies.fcfs import FCFSPolicy
from scheduler.policies.gittins import GittinsPolicy
from scheduler.policies.las import LASPolicy
from scheduler.policies.mlfq import MLFQPolicy
from scheduler.policies.oracle import OraclePolicy
from scheduler.policies.pfcfs import ProgramFCFSPolicy
from scheduler.policies.plas import PLASPolicy

POLICIES = MappingProxyType({p.name: p for p in (FCFSPolicy, LASPolicy, MLFQPolicy,
                                                   PLASPolicy, ATLASPolicy, ProgramFCFSPolicy,
                                                   GittinsPolicy, OraclePolicy)})

PolicySpec = str | type[Policy]

# `EngineConfig.policy`'s default, here so that torch-free code (`agentix serve`'s parser)
# reads it too: chosen on the steady-state tables of bench/notes/2026-12-01-learnt-scheduling.md.
DEFAULT_POLICY = GittinsPolicy.name


def policy_name(spec: PolicySpec) -> str:
    """The name of a registered policy or of a Policy class (ValueError otherwise)."""
    if isinstance(spec, type) and issubclass(spec, Policy):
        if not spec.name:
            raise ValueError(f"policy: {spec.__name__} has no name")
        return spec.name
    if spec not in POLICIES:
        raise ValueError(f"policy must be one of {sorted(POLICIES)} or a Policy class, "
                         f"got {spec!r}")
    return spec


def make_policy(spec: PolicySpec) -> Policy:
    """A fresh policy object from a registered name or a Policy class."""
    policy_name(spec)
    return spec() if isinstance(spec, type) else POLICIES[spec]()


__all__ = ["DEFAULT_POLICY", "POLICIES", "Policy", "PolicySpec", "Retention", "make_policy",
           "policy_name"]
