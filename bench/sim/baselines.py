"""The benchmark's named engine configurations (`BASELINES`), all in this one engine with the
same memory, and the EngineConfig fields of a run under one of them (`engine_config_for`).
Every baseline states the policy, prefix caching, KV memory and preemption it runs with, and
runs without a first-token deadline (`ttft_slo_tokens=None`), whatever the engine's defaults;
`DEFAULTS` names a run on the engine's own defaults (EngineConfig's: what `agentix serve`
runs), `agentix bench sim`'s when no --policy is given.

- `vllm`: FCFS, recompute on preemption, no chunked prefill, no prefix caching, LRU cache;
- `optimized`: FCFS with chunked prefill, prefix caching and multistep 4 (vLLM's: a round is
  not cut by new calls, `multistep_yields=False`), LRU cache;
- `vllm06`: the paper's "vLLM-opt" as vLLM 0.6 could run it (the paper built on 0.6.1): FCFS,
  chunked prefill with vLLM 0.6's default budget for it (`max_num_batched_tokens=512`, the
  value its SchedulerConfig picks when chunked prefill is on), automatic prefix caching on
  (an option in 0.6, off by default; the paper's optimized baseline names it, so it is on),
  multistep 1 (0.6 refused multi-step scheduling together with chunked prefill), recompute
  preemption (vLLM's default) and the LRU cache: `optimized` row by row against the paper's
  figure differs only in the budget (8,192 here) and multistep (4);
- every registered scheduling policy but fcfs (`mlfq`, `las`, `plas`, `atlas`, `pfcfs`,
  `gittins`, `oracle`):
  `optimized`'s features, `auto` preemption, program-aware KV memory (`kv_memory="program"`),
  except the request-level `mlfq` and `las`, which keep the LRU cache;
- ablations: `optimized-mem` (FCFS with program-aware memory and `auto` preemption: retention
  and the host tier without program scheduling, roughly Continuum) and `atlas-lru` (`atlas` on
  the LRU cache).
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any, Mapping

from engine.config import EngineConfig
from scheduler.policies import POLICIES

BLOCK_SIZE = 16

# The engine features of `optimized`; every scheduling baseline runs with them too, so a
# difference to `optimized` is the scheduling (and the KV memory) alone.
_OPTIMIZED: Mapping[str, Any] = MappingProxyType(dict(
    enable_chunked_prefill=True, enable_prefix_caching=True, multistep=4,
    multistep_yields=False))
VLLM06_BUDGET = 512  # vLLM 0.6's max_num_batched_tokens with chunked prefill on
REQUEST_LEVEL = ("mlfq", "las")  # request-level baselines: they keep today's LRU cache
# No first-token deadline in any baseline (as every one was measured); a study of the deadline
# sets one with its overrides.
_NO_DEADLINE: Mapping[str, Any] = MappingProxyType(dict(ttft_slo_tokens=None))
DEFAULTS = "defaults"  # the engine's own defaults (`_ENGINE_DEFAULTS`)

# FCFS, no prefix cache, recompute preemption, no first-token deadline and multistep 1 (the
# library's defaults before they became the serving ones): the engine that the real-model
# timing and parity studies measure, so that their figures stay comparable.
PLAIN: Mapping[str, Any] = MappingProxyType(dict(
    policy="fcfs", enable_prefix_caching=False, preemption_mode="recompute",
    ttft_slo_tokens=None, multistep=1))


def _scheduling_baseline(policy: str) -> dict[str, Any]:
    memory = "lru" if policy in REQUEST_LEVEL else "program"
    return dict(policy=policy, preemption_mode="auto", kv_memory=memory, **_OPTIMIZED)


def _baselines() -> dict[str, Mapping[str, Any]]:
    """vllm, optimized, vllm06, optimized-mem, every registered policy but fcfs (in the
    registry's order), atlas-lru."""
    named: dict[str, dict[str, Any]] = {
        "vllm": dict(policy="fcfs", preemption_mode="recompute", kv_memory="lru",
                     enable_chunked_prefill=False, enable_prefix_caching=False, multistep=1),
        "optimized": dict(policy="fcfs", preemption_mode="recompute", kv_memory="lru",
                          **_OPTIMIZED),
        "vllm06": dict(policy="fcfs", preemption_mode="recompute", kv_memory="lru",
                       enable_chunked_prefill=True, max_num_batched_tokens=VLLM06_BUDGET,
                       enable_prefix_caching=True, multistep=1),
        "optimized-mem": dict(policy="fcfs", preemption_mode="auto", kv_memory="program",
                              **_OPTIMIZED),
        **{name: _scheduling_baseline(name) for name in POLICIES if name != "fcfs"},
        "atlas-lru": {**_scheduling_baseline("atlas"), "kv_memory": "lru"},
    }
    return {name: MappingProxyType({**fields, **_NO_DEADLINE}) for name, fields in named.items()}


# Each is a set of EngineConfig fields on top of `_COMMON`.
BASELINES: Mapping[str, Mapping[str, Any]] = MappingProxyType(_baselines())


_COMMON: Mapping[str, Any] = MappingProxyType(dict(
    block_size=BLOCK_SIZE, max_num_seqs=256, max_num_batched_tokens=8192, service_mode="time",
    dtype="bfloat16"))


def _engine_defaults() -> Mapping[str, Any]:
    """EngineConfig()'s value of every field a baseline sets but the common sizes (read,
    not restated)."""
    values = EngineConfig().as_flat()
    return MappingProxyType({name: values[name] for fields in BASELINES.values()
                             for name in fields if name not in _COMMON})


_ENGINE_DEFAULTS = _engine_defaults()


def engine_config_for(policy: str, engine_overrides: dict[str, Any] | None = None,
                      **fields: Any) -> dict[str, Any]:
    """The EngineConfig fields of a run under the baseline `policy` (or `DEFAULTS`: the
    engine's own defaults; or a bare scheduler policy name: chunked prefill, `auto`
    preemption, no prefix caching and no first-token deadline, the engine's defaults
    otherwise): the common fields, the baseline's, `fields`, then `engine_overrides`, each
    over the one before. ValueError for an unknown policy or field."""
    if policy == DEFAULTS:
        base = _ENGINE_DEFAULTS
    elif policy in BASELINES:
        base = BASELINES[policy]
    elif policy in POLICIES:
        base = dict(policy=policy, enable_chunked_prefill=True, preemption_mode="auto",
                    enable_prefix_caching=False, **_NO_DEADLINE)
    else:
        names = sorted({*BASELINES, *POLICIES, DEFAULTS})
        raise ValueError(f"policy must be one of {names}, got {policy!r}")
    config = {**_COMMON, **base, **fields, **(engine_overrides or {})}
    unknown = config.keys() - EngineConfig.flat_field_types().keys()
    if unknown:
        raise ValueError(f"engine_overrides: unknown field(s) {sorted(unknown)}")
    return config
