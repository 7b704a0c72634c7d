"""Engine configuration: one frozen dataclass, validated on construction."""

from __future__ import annotations

from dataclasses import dataclass, fields

from scheduler.config import SchedulerConfig
from scheduler.policies import PolicySpec, policy_name

DTYPES = ("float32", "float16", "bfloat16", "float64")
SCHEDULER_FIELDS = frozenset(f.name for f in fields(SchedulerConfig)) - {"bytes_per_block"}
_SCHEDULER_DEFAULTS = SchedulerConfig()  # the single source of the scheduler's defaults


@dataclass(frozen=True)
class EngineConfig:
    """Everything an `LLMEngine` needs to know before it loads a model.

    `num_kv_blocks` counts device blocks including the reserved null block 0; `None` sizes the
    pool from `kv_cache_memory_gb`. `policy` is a registered name (`scheduler.policies`) or a
    Policy class. The scheduler's fields (batch limits, `policy`'s queues,
    anti-starvation, preemption, `multistep`, `service_mode`, `program_ttl`, the program and
    tenant bounds) have the same names and meaning as in `scheduler.config.SchedulerConfig`,
    which validates them.
    """

    model: str = ""
    dtype: str = "float32"
    device: str = "cpu"
    block_size: int = 16
    num_kv_blocks: int | None = None
    kv_cache_memory_gb: float = 1.0
    num_host_blocks: int = 0
    max_model_len: int | None = None
    enable_prefix_caching: bool = False
    policy: PolicySpec = "fcfs"
    seed: int = 0
    # scheduler (see SchedulerConfig)
    max_num_seqs: int = _SCHEDULER_DEFAULTS.max_num_seqs
    max_num_batched_tokens: int = _SCHEDULER_DEFAULTS.max_num_batched_tokens
    enable_chunked_prefill: bool = _SCHEDULER_DEFAULTS.enable_chunked_prefill
    preemption_mode: str = _SCHEDULER_DEFAULTS.preemption_mode
    multistep: int = _SCHEDULER_DEFAULTS.multistep
    num_queues: int = _SCHEDULER_DEFAULTS.num_queues
    quantum_base: float | None = _SCHEDULER_DEFAULTS.quantum_base
    quantum_growth: float = _SCHEDULER_DEFAULTS.quantum_growth
    quantum_steps: int = _SCHEDULER_DEFAULTS.quantum_steps
    calibration_steps: int = _SCHEDULER_DEFAULTS.calibration_steps
    starvation_beta: float | None = _SCHEDULER_DEFAULTS.starvation_beta
    service_mode: str = _SCHEDULER_DEFAULTS.service_mode
    program_ttl: float = _SCHEDULER_DEFAULTS.program_ttl
    tenant_halflife: float | None = _SCHEDULER_DEFAULTS.tenant_halflife
    max_preemptions_per_round: int = _SCHEDULER_DEFAULTS.max_preemptions_per_round
    host_link_bandwidth: float = _SCHEDULER_DEFAULTS.host_link_bandwidth
    swap_latency: float = _SCHEDULER_DEFAULTS.swap_latency
    prefill_tokens_per_second: float = _SCHEDULER_DEFAULTS.prefill_tokens_per_second
    measure_rates: bool = _SCHEDULER_DEFAULTS.measure_rates
    kv_memory: str = _SCHEDULER_DEFAULTS.kv_memory
    retention_budget: float = _SCHEDULER_DEFAULTS.retention_budget
    retention_prior_seconds: float = _SCHEDULER_DEFAULTS.retention_prior_seconds
    retention_ttl_factor: float = _SCHEDULER_DEFAULTS.retention_ttl_factor
    retention_max_seconds: float = _SCHEDULER_DEFAULTS.retention_max_seconds
    program_service_halflife: float | None = _SCHEDULER_DEFAULTS.program_service_halflife
    max_programs: int = _SCHEDULER_DEFAULTS.max_programs
    max_programs_per_tenant: int = _SCHEDULER_DEFAULTS.max_programs_per_tenant
    max_tenants: int = _SCHEDULER_DEFAULTS.max_tenants

    def __post_init__(self) -> None:
        if self.block_size <= 0:
            raise ValueError(f"block_size must be positive, got {self.block_size}")
        if self.num_kv_blocks is not None and self.num_kv_blocks < 2:
            raise ValueError(f"num_kv_blocks must be at least 2, got {self.num_kv_blocks}")
        if self.num_host_blocks < 0:
            raise ValueError(f"num_host_blocks must be >= 0, got {self.num_host_blocks}")
        if self.kv_cache_memory_gb <= 0:
            raise ValueError(f"kv_cache_memory_gb must be positive, got {self.kv_cache_memory_gb}")
        if self.max_model_len is not None and self.max_model_len <= 0:
            raise ValueError(f"max_model_len must be positive, got {self.max_model_len}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {DTYPES}, got {self.dtype!r}")
        if self.preemption_mode == "swap" and self.num_host_blocks == 0:
            raise ValueError("preemption_mode='swap' needs num_host_blocks > 0")
        policy_name(self.policy)
        if self.preemption_mode == "keep" and not self.enable_prefix_caching:
            raise ValueError("preemption_mode='keep' needs enable_prefix_caching")
        self.scheduler_config(bytes_per_block=0)

    def scheduler_config(self, bytes_per_block: int) -> SchedulerConfig:
        """The scheduler's part of this config (raises ValueError naming a bad field)."""
        return SchedulerConfig(bytes_per_block=bytes_per_block,
                               **{name: getattr(self, name) for name in SCHEDULER_FIELDS})

    @classmethod
    def field_names(cls) -> frozenset[str]:
        return frozenset(f.name for f in fields(cls))
