"""Scheduler knobs (a subset of the engine config, so the scheduler never imports engine)."""

from __future__ import annotations

from dataclasses import dataclass

PREEMPTION_MODES = ("recompute", "swap", "keep", "auto")
SERVICE_MODES = ("time", "tokens")
KV_MEMORY_MODES = ("lru", "program")
RETENTION_RULES = ("ttl", "learnt")
MAX_TTFT_SLO_TOKENS = 10_000_000  # a first-token deadline in tokens of prefill, at most


@dataclass(frozen=True)
class SchedulerConfig:
    """Batch limits, queue shape, anti-starvation, preemption and multistep.

    `quantum_base` is in service units (seconds, or tokens in token mode); `None` means 256
    tokens in token mode, and in time mode `quantum_steps` times the median of the first
    `calibration_steps` step times (1 s until then), so the same default fits a small model on
    a CPU and an 8B model on an A100. `starvation_beta` 0 or None turns anti-starvation off.
    `max_preemptions_per_round` bounds preemptions made to admit higher-priority calls
    (preemptions for memory of already running calls are needed for progress and not bounded).
    `tenant_halflife` (seconds; None turns it off) is the decay of a tenant's recent service,
    from which each new program of the tenant starts (anti-gaming; see ProcessTable).

    Preemption: `recompute` drops a victim's KV, `swap` moves it to host in one bulk copy,
    `keep` frees it into the prefix cache at its program's rank (it is revived by a prefix hit,
    offloaded to host if evicted, recomputed only if lost; needs prefix caching), and `auto`
    (the default) picks the cheapest estimate per preemption (see `scheduler.preemption`), from
    `host_link_bandwidth` and `prefill_tokens_per_second` as priors that the engine replaces by
    measured rates once it has seen swaps and prefill steps (`measure_rates`, time mode only).

    `kv_memory` is who decides what the prefix cache keeps: `lru` (least recently freed goes
    first) or `program` (see `scheduler.memory`): cached blocks are ranked by their program's
    priority, a program's KV is retained across a tool call for a time (at most
    `retention_max_seconds`) within `retention_budget` (a fraction of the device pool),
    admissions never evict a higher-priority program's retained KV, and evicted blocks of live
    programs are offloaded to the host pool. The time: with the client's hint of the tool
    time, `retention_ttl_factor` x the hint; else by `retention_rule`: `learnt` weighs the
    chance the program returns in time against what its memory costs, from the tool times of
    its class (see `scheduler.tool_times`), and `ttl` (or `learnt` before it has samples)
    takes `retention_ttl_factor` x the program's mean observed tool time, else
    `retention_prior_seconds`. With `prefetch`, a live program's KV offloaded to host comes
    back onto free device blocks before its next call is expected. `kv_ranks_by_level`
    (default) ranks a program's KV by the level of its next call first, so an admission may
    evict a lower-priority program's retained KV; off, every live program's KV ranks by its
    retention state alone (as with one level), so no admission evicts any program's retained
    tool-call KV, whatever the levels (measured on coding:
    bench/notes/2026-12-01-learnt-scheduling.md, "Why gittins loses on coding").
    Multistep: with `multistep=N` a round of decodes runs N steps without scheduling again;
    with `multistep_yields` (default) a call added during a round ends it, so the next step
    schedules and the new call is admitted as with `multistep=1` (the round's calls keep the
    blocks it reserved for its later steps, for `multistep - 1` tokens each at most, and
    fill them as they decode; a swap-out copies them too). Off, a new call waits for the
    round's end (vLLM's multi-step scheduling; the benchmark's baselines).
    Deadlines (seconds, None = off): a call that has produced no token is promoted to the
    top level once `ttft_slo_seconds` after its arrival less its estimated prefill time has
    passed (a request may set its own), and a call preempted after producing tokens once
    `itl_slo_seconds` after its preemption has passed. Without `ttft_slo_seconds`,
    `ttft_slo_tokens` (None = off) sets the first-token deadline in the engine's own terms:
    the time it takes to prefill that many tokens at its prefill speed when the call arrives
    (`prefill_tokens_per_second`, measured), so one setting means the same on any hardware
    (2,048, the default: 0.18 s for Llama-3.1-8B on an A100). Like an
    anti-starvation promotion, a promoted preempted call waits for room; a call promoted for
    its first token may preempt lower levels to get in.

    `program_service_halflife` (seconds, None = off) decays a program's attained service
    while it is idle between calls (while its tenant is idle, with tenant accounting).

    Bounds (see ProcessTable): at most `max_programs` active programs in all and
    `max_programs_per_tenant` per tenant (programs without a tenant count as one tenant);
    starting one more raises ProgramLimitError (RESOURCE_EXHAUSTED on the wire). One-call
    programs (a call made without a program) are not counted or refused: the waiting bound
    and the seats bound them, and a flood of StartProgram cannot lock out plain calls. At
    most `max_tenants` tenant service records are kept (least recently credited dropped
    first; records decayed below 2**-30 of their value are pruned).
    Without auth, the tenant is whatever the client says, so the per-tenant bound and the
    anti-gaming floors only bind clients that cannot choose their tenant (auth on).
    """

    max_num_seqs: int = 64
    max_num_batched_tokens: int = 2048
    enable_chunked_prefill: bool = True
    preemption_mode: str = "auto"
    multistep: int = 4
    multistep_yields: bool = True
    num_queues: int = 8
    quantum_base: float | None = None
    quantum_growth: float = 2.0
    quantum_steps: int = 64
    calibration_steps: int = 16
    # 4.0: its only support is the knob-sensitivity sweep, which is stale (simulated before
    # the simulator's token-stream fix 051fd4c and program-aware memory; not re-run since):
    # bench/RESULTS_ARCHIVE.md, "Knob sensitivity".
    starvation_beta: float | None = 4.0
    service_mode: str = "time"
    program_ttl: float = 600.0
    tenant_halflife: float | None = 300.0
    max_preemptions_per_round: int = 4
    bytes_per_block: int = 0
    host_link_bandwidth: float = 25e9
    swap_latency: float = 1e-4
    prefill_tokens_per_second: float = 10_000.0
    measure_rates: bool = True
    kv_memory: str = "program"
    kv_ranks_by_level: bool = True
    retention_budget: float = 0.5
    retention_prior_seconds: float = 1.0
    retention_ttl_factor: float = 2.0
    retention_max_seconds: float = 60.0
    retention_rule: str = "learnt"
    prefetch: bool = False
    program_service_halflife: float | None = None
    ttft_slo_seconds: float | None = None
    ttft_slo_tokens: int | None = 2048
    itl_slo_seconds: float | None = None
    max_programs: int = 10_000
    max_programs_per_tenant: int = 1_000
    max_tenants: int = 100_000

    def __post_init__(self) -> None:
        for name in ("max_num_seqs", "max_num_batched_tokens", "multistep", "num_queues",
                     "quantum_steps", "calibration_steps", "host_link_bandwidth",
                     "prefill_tokens_per_second", "program_ttl", "retention_max_seconds",
                     "max_programs", "max_programs_per_tenant", "max_tenants"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.max_preemptions_per_round < 0:
            raise ValueError(f"max_preemptions_per_round must be >= 0, got "
                             f"{self.max_preemptions_per_round}")
        if self.quantum_base is not None and self.quantum_base <= 0:
            raise ValueError(f"quantum_base must be positive, got {self.quantum_base}")
        if self.quantum_growth <= 1:
            raise ValueError(f"quantum_growth must be > 1, got {self.quantum_growth}")
        if self.tenant_halflife is not None and self.tenant_halflife <= 0:
            raise ValueError(f"tenant_halflife must be positive or None, got "
                             f"{self.tenant_halflife}")
        if self.starvation_beta is not None and self.starvation_beta < 0:
            raise ValueError(f"starvation_beta must be >= 0 or None, got {self.starvation_beta}")
        if self.preemption_mode not in PREEMPTION_MODES:
            raise ValueError(
                f"preemption_mode must be one of {PREEMPTION_MODES}, got {self.preemption_mode!r}"
            )
        if self.kv_memory not in KV_MEMORY_MODES:
            raise ValueError(f"kv_memory must be one of {KV_MEMORY_MODES}, got "
                             f"{self.kv_memory!r}")
        if self.retention_rule not in RETENTION_RULES:
            raise ValueError(f"retention_rule must be one of {RETENTION_RULES}, got "
                             f"{self.retention_rule!r}")
        if not 0 <= self.retention_budget <= 1:
            raise ValueError(f"retention_budget must be in [0, 1], got {self.retention_budget}")
        for name in ("retention_prior_seconds", "retention_ttl_factor"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.program_service_halflife is not None and self.program_service_halflife <= 0:
            raise ValueError(f"program_service_halflife must be positive or None, got "
                             f"{self.program_service_halflife}")
        for name in ("ttft_slo_seconds", "itl_slo_seconds"):
            value = getattr(self, name)
            if value is not None and not 0 < value < float("inf"):
                raise ValueError(f"{name} must be positive and finite or None, got {value}")
        if self.ttft_slo_tokens is not None and (
                isinstance(self.ttft_slo_tokens, bool) or not isinstance(self.ttft_slo_tokens, int)
                or not 0 < self.ttft_slo_tokens <= MAX_TTFT_SLO_TOKENS):
            raise ValueError(f"ttft_slo_tokens must be an int in [1, {MAX_TTFT_SLO_TOKENS}] or "
                             f"None, got {self.ttft_slo_tokens!r}")
        if self.service_mode not in SERVICE_MODES:
            raise ValueError(f"service_mode must be one of {SERVICE_MODES}, got "
                             f"{self.service_mode!r}")

    @property
    def anti_starvation(self) -> bool:
        return bool(self.starvation_beta)
