"""Engine configuration: one frozen dataclass, validated on construction."""

from __future__ import annotations

import typing
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import torch

from engine.parallel.layout import check_tensor_parallel_size
from engine.parallel.nodes import check_nodes
from scheduler.config import SchedulerConfig
from scheduler.policies import DEFAULT_POLICY, PolicySpec, policy_name

DTYPES = ("float32", "float16", "bfloat16", "float64")
DEVICE_TYPES = ("cpu", "cuda")


def _check_device(device: object) -> None:
    """`device` is "cpu", "cuda" or "cuda:N" (ValueError otherwise); whether this machine has
    it is for runtime to say."""
    try:
        parsed = torch.device(device) if isinstance(device, str) else None
    except RuntimeError:
        parsed = None
    if parsed is None or parsed.type not in DEVICE_TYPES:
        raise ValueError(f"device must be cpu, cuda or cuda:N, got {device!r}")


@dataclass(frozen=True)
class EngineConfig:
    """Everything an `LLMEngine` needs to know before it loads a model.

    `num_kv_blocks` counts device blocks including the reserved null block 0; `None` sizes the
    pool from `kv_cache_memory_gb`. `block_size` is a power of two. `policy` is a registered
    name (`scheduler.policies`) or a Policy class. `scheduler` holds the scheduler's knobs
    (batch limits, the policy's queues, anti-starvation, preemption, `multistep`, the program
    and tenant bounds; see SchedulerConfig, which validates them); its `bytes_per_block` is
    the engine's to fill in from the KV cache spec, whatever it is here. `from_flat` takes
    both kinds of field as flat keywords, vLLM style. `tensor_parallel_size` N > 1 splits the
    model over N ranks (`engine.parallel`: N devices from `device` on CUDA, N processes on
    the CPU); the model's heads must split N ways (checked when it loads); `nnodes` > 1
    spreads them over that many machines, N / nnodes each, node 0 listening on
    `dist_init_addr` (`engine.parallel.nodes`). Each rank holds
    `num_kv_blocks` blocks of its own KV heads (or as many as `kv_cache_memory_gb` holds).
    `chat_template`: a Jinja file that chat prompts are rendered with instead of the model's
    own template (vLLM's `--chat-template`; see engine/chat_templates/).
    `greedy_screen`: greedy rows may take their tokens from a bf16 screen of the LM head
    where that pays and is exact (`engine.models.greedy_screen`); False always computes the
    full fp32 logits.

    The defaults are the serving ones, and the only ones: `LLM(...)`, `agentix serve`, the
    demo, the Kubernetes manifests and `agentix bench sim` without `--policy` all run the
    `gittins` policy with prefix caching, program-aware KV memory (`kv_memory="program"`),
    `auto` preemption and a first-token deadline of 2,048 tokens of prefill
    (`ttft_slo_tokens`); a caller that wants another value (a benchmark baseline, a test of
    exact orders) says so where it builds its config.
    """

    model: str = ""
    dtype: str = "float32"
    device: str = "cpu"
    block_size: int = 16
    num_kv_blocks: int | None = None
    kv_cache_memory_gb: float = 1.0
    num_host_blocks: int = 0
    max_model_len: int | None = None
    enable_prefix_caching: bool = True
    policy: PolicySpec = DEFAULT_POLICY
    seed: int = 0
    tensor_parallel_size: int = 1
    nnodes: int = 1
    dist_init_addr: str | None = None
    chat_template: str | None = None
    greedy_screen: bool = True
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)

    def __post_init__(self) -> None:
        if not (isinstance(self.block_size, int) and self.block_size > 0
                and self.block_size & (self.block_size - 1) == 0):
            raise ValueError(f"block_size must be a power of two, got {self.block_size}")
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
        if self.chat_template is not None and not Path(self.chat_template).is_file():
            raise ValueError(f"chat_template: {self.chat_template} is not a file")
        _check_device(self.device)
        check_tensor_parallel_size(self.tensor_parallel_size)
        check_nodes(self.tensor_parallel_size, self.nnodes, self.dist_init_addr)
        policy_name(self.policy)
        if not isinstance(self.scheduler, SchedulerConfig):
            raise ValueError(f"scheduler must be a SchedulerConfig, got "
                             f"{type(self.scheduler).__name__}")
        if self.scheduler.preemption_mode == "swap" and self.num_host_blocks == 0:
            raise ValueError("preemption_mode='swap' needs num_host_blocks > 0")
        if self.scheduler.preemption_mode == "keep" and not self.enable_prefix_caching:
            raise ValueError("preemption_mode='keep' needs enable_prefix_caching")

    @classmethod
    def from_flat(cls, **overrides: Any) -> EngineConfig:
        """The defaults with `overrides`: this class's fields and SchedulerConfig's (all but
        the engine-filled `bytes_per_block`), each by its own name. ValueError naming unknown
        fields or a bad value."""
        unknown = overrides.keys() - cls.flat_field_types().keys()
        if unknown:
            raise ValueError(f"unknown engine config field(s): {sorted(unknown)}")
        ours = {f.name for f in fields(cls)}
        scheduler = SchedulerConfig(**{k: v for k, v in overrides.items() if k not in ours})
        return cls(scheduler=scheduler, **{k: v for k, v in overrides.items() if k in ours})

    def as_flat(self) -> dict[str, Any]:
        """Every field `from_flat` takes, with its value here (`from_flat(**c.as_flat())` is
        `c` but for the engine-filled `bytes_per_block`)."""
        scheduler = {f.name: getattr(self.scheduler, f.name) for f in fields(self.scheduler)
                     if f.name != "bytes_per_block"}
        return {**scheduler, **{f.name: getattr(self, f.name) for f in fields(self)
                                if f.name != "scheduler"}}

    @classmethod
    def flat_field_types(cls) -> dict[str, Any]:
        """Every field `from_flat` takes, with its resolved annotation."""
        hints = {**typing.get_type_hints(SchedulerConfig), **typing.get_type_hints(cls)}
        del hints["scheduler"], hints["bytes_per_block"]
        return hints
