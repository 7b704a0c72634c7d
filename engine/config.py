"""Engine configuration: one frozen dataclass, validated on construction."""

from __future__ import annotations

from dataclasses import dataclass, fields

PREEMPTION_MODES = ("recompute", "swap", "auto")
DTYPES = ("float32", "float16", "bfloat16", "float64")


@dataclass(frozen=True)
class EngineConfig:
    """Everything an `LLMEngine` needs to know before it loads a model.

    `num_kv_blocks` counts device blocks including the reserved null block 0; `None` sizes the
    pool from `kv_cache_memory_gb`. `max_num_batched_tokens` is the token budget of one step
    (prefill chunks plus decodes). `multistep` is the number of decode steps run per
    scheduling round. `service_mode` says what the scheduler charges as service: wall time of
    steps, or tokens processed (deterministic, for tests).
    """

    model: str = ""
    dtype: str = "float32"
    device: str = "cpu"
    block_size: int = 16
    num_kv_blocks: int | None = None
    kv_cache_memory_gb: float = 1.0
    num_host_blocks: int = 0
    max_num_seqs: int = 64
    max_num_batched_tokens: int = 2048
    max_model_len: int | None = None
    enable_prefix_caching: bool = False
    enable_chunked_prefill: bool = True
    preemption_mode: str = "recompute"
    multistep: int = 1
    policy: str = "fcfs"
    service_mode: str = "time"
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("block_size", "max_num_seqs", "max_num_batched_tokens", "multistep"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
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
        if self.preemption_mode not in PREEMPTION_MODES:
            raise ValueError(
                f"preemption_mode must be one of {PREEMPTION_MODES}, got {self.preemption_mode!r}"
            )
        if self.preemption_mode == "swap" and self.num_host_blocks == 0:
            raise ValueError("preemption_mode='swap' needs num_host_blocks > 0")
        if self.service_mode not in ("time", "tokens"):
            raise ValueError(f"service_mode must be 'time' or 'tokens', got {self.service_mode!r}")
        if not self.enable_chunked_prefill and self.max_model_len is not None \
                and self.max_model_len > self.max_num_batched_tokens:
            raise ValueError(
                "max_num_batched_tokens must be >= max_model_len when chunked prefill is off"
            )

    @classmethod
    def field_names(cls) -> frozenset[str]:
        return frozenset(f.name for f in fields(cls))
