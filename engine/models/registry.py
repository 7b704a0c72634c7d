"""The architectures the engine loads: `config.json`'s `architectures[0]` -> its args reader
and its model class.

Qwen2, Qwen3 and Mistral run on the Llama decoder (`engine.models.llama`), set by the flags
their readers put in `LlamaArgs`; Falcon has its own (`engine.models.falcon`).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Callable, Mapping

from torch import nn

from engine.models.args import ModelArgs
from engine.models.falcon import FalconArgs, FalconForCausalLM
from engine.models.llama import LlamaArgs, LlamaForCausalLM
from engine.models.mistral import mistral_args
from engine.models.qwen import qwen2_args, qwen3_args


@dataclass(frozen=True)
class Architecture:
    """`read_args(config.json dict)`: the model's args (ValueError naming a field the engine
    cannot run); `model_class(args, max_positions)`: the model, its module names those of
    the Hugging Face checkpoint."""

    read_args: Callable[[dict], ModelArgs]
    model_class: Callable[[ModelArgs, int], nn.Module]


ARCHITECTURES: Mapping[str, Architecture] = MappingProxyType({
    "FalconForCausalLM": Architecture(FalconArgs.from_hf_config, FalconForCausalLM),
    "LlamaForCausalLM": Architecture(LlamaArgs.from_hf_config, LlamaForCausalLM),
    "MistralForCausalLM": Architecture(mistral_args, LlamaForCausalLM),
    "Qwen2ForCausalLM": Architecture(qwen2_args, LlamaForCausalLM),
    "Qwen3ForCausalLM": Architecture(qwen3_args, LlamaForCausalLM),
})


def architecture(cfg: dict) -> Architecture:
    """The `Architecture` of a Hugging Face `config.json` dict (no `architectures`: Llama);
    ValueError naming the architecture and the supported ones when it is not supported."""
    arch = (cfg.get("architectures") or ["LlamaForCausalLM"])[0]
    if arch not in ARCHITECTURES:
        raise ValueError(f"model: architecture {arch!r} is not supported "
                         f"(supported: {', '.join(ARCHITECTURES)})")
    return ARCHITECTURES[arch]
