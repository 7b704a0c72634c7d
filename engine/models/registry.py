"""The architectures the engine loads: `config.json`'s `architectures[0]` -> its args reader.

Every family runs on the one Llama decoder (`engine.models.llama`), set by the flags its
reader puts in `LlamaArgs`.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Callable, Mapping

from engine.models.llama import LlamaArgs
from engine.models.mistral import mistral_args
from engine.models.qwen import qwen2_args, qwen3_args

READERS: Mapping[str, Callable[[dict], LlamaArgs]] = MappingProxyType({
    "LlamaForCausalLM": LlamaArgs.from_hf_config,
    "MistralForCausalLM": mistral_args,
    "Qwen2ForCausalLM": qwen2_args,
    "Qwen3ForCausalLM": qwen3_args,
})


def model_args(cfg: dict) -> LlamaArgs:
    """The `LlamaArgs` of a Hugging Face `config.json` dict (no `architectures`: Llama);
    ValueError naming the architecture and the supported ones when it is not supported."""
    arch = (cfg.get("architectures") or ["LlamaForCausalLM"])[0]
    if arch not in READERS:
        raise ValueError(f"model: architecture {arch!r} is not supported "
                         f"(supported: {', '.join(READERS)})")
    return READERS[arch](cfg)
