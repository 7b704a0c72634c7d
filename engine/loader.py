"""Load a model of a supported architecture (`engine.models.registry`) from a Hugging Face
directory, and what the engine needs of a model besides its weights (`ModelInfo`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file

from engine.models.layers import RotaryEmbedding
from engine.models.llama import LlamaArgs, LlamaForCausalLM
from engine.models.registry import model_args
from engine.tokenizer import Tokenizer, load_tokenizer


@dataclass(frozen=True)
class ModelInfo:
    """What the engine needs of a model besides its weights: its shape, its EOS ids and its
    tokenizer. Without a tokenizer, prompts and outputs are token ids only: text and chat
    prompts and stop strings are refused (ValueError), and outputs carry no text."""

    args: LlamaArgs
    eos_token_ids: tuple[int, ...]
    tokenizer: Tokenizer | None = None

    @classmethod
    def from_hf_config(cls, cfg: dict, tokenizer: Tokenizer | None = None) -> ModelInfo:
        """From a Hugging Face `config.json` dict (no directory: an injected executor)."""
        return cls(model_args(cfg), _token_ids(cfg.get("eos_token_id")), tokenizer)


@dataclass(frozen=True)
class ModelFiles:
    """What a model directory holds: the parsed config, the EOS ids and the directory."""

    path: Path
    hf_config: dict
    args: LlamaArgs
    eos_token_ids: tuple[int, ...]


def read_model_dir(model_dir: str | Path) -> ModelFiles:
    path = Path(model_dir)
    config_file = path / "config.json"
    if not config_file.is_file():
        raise ValueError(f"model: {path} has no config.json")
    cfg = json.loads(config_file.read_text())
    eos = cfg.get("eos_token_id")
    gen_file = path / "generation_config.json"
    if gen_file.is_file():
        eos = json.loads(gen_file.read_text()).get("eos_token_id", eos)
    return ModelFiles(path, cfg, model_args(cfg), _token_ids(eos))


def read_model_info(files: ModelFiles) -> ModelInfo:
    """The directory's model info, its tokenizer loaded (None when it ships none)."""
    return ModelInfo(files.args, files.eos_token_ids, load_tokenizer(files.path))


def _token_ids(value: int | list[int] | None) -> tuple[int, ...]:
    """An `eos_token_id` entry (one id, a list or None) as a tuple of ids."""
    return tuple(value) if isinstance(value, list) else (() if value is None else (value,))


def load_model(files: ModelFiles, max_positions: int, dtype: torch.dtype,
               device: torch.device) -> LlamaForCausalLM:
    """Build the model on `device` and load every safetensors shard into it (strict)."""
    with torch.device("meta"):
        model = LlamaForCausalLM(files.args, max_positions)
    model = model.to_empty(device=device)
    # Buffers are not in the checkpoint: rebuild the RoPE tables for real on `device`.
    model.model.rotary = RotaryEmbedding(files.args.head_dim, max_positions,
                                         files.args.rope_theta, files.args.rope_scaling).to(device)
    state: dict[str, torch.Tensor] = {}
    for shard in sorted(files.path.glob("*.safetensors")):
        state.update(load_file(str(shard)))
    if not state:
        raise ValueError(f"model: no *.safetensors files in {files.path}")
    if files.args.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [m for m in missing if not (files.args.tie_word_embeddings and m == "lm_head.weight")]
    if missing or unexpected:
        raise ValueError(f"model: weights do not match (missing {missing[:4]}, "
                         f"unexpected {unexpected[:4]})")
    if files.args.tie_word_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
    return model.to(dtype).eval()
