"""Load a model of a supported architecture (`engine.models.registry`) from a Hugging Face
directory, and what the engine needs of a model besides its weights (`ModelInfo`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
from safetensors.torch import load_file
from torch import nn

from engine.models.args import ModelArgs
from engine.models.layers import RotaryEmbedding
from engine.models.registry import architecture
from engine.tokenizer import Tokenizer, load_tokenizer


@dataclass(frozen=True)
class ModelInfo:
    """What the engine needs of a model besides its weights: its shape, its EOS ids and its
    tokenizer. Without a tokenizer, prompts and outputs are token ids only: text and chat
    prompts and stop strings are refused (ValueError), and outputs carry no text."""

    args: ModelArgs
    eos_token_ids: tuple[int, ...]
    tokenizer: Tokenizer | None = None

    @classmethod
    def from_hf_config(cls, cfg: dict, tokenizer: Tokenizer | None = None) -> ModelInfo:
        """From a Hugging Face `config.json` dict (no directory: an injected executor)."""
        return cls(architecture(cfg).read_args(cfg), _token_ids(cfg.get("eos_token_id")),
                   tokenizer)


@dataclass(frozen=True)
class ModelFiles:
    """What a model directory holds: the parsed config, the model's args and class (its
    `engine.models.registry.Architecture`), the EOS ids and the directory."""

    path: Path
    hf_config: dict
    args: ModelArgs
    model_class: Callable[[ModelArgs, int], nn.Module]
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
    arch = architecture(cfg)
    return ModelFiles(path, cfg, arch.read_args(cfg), arch.model_class, _token_ids(eos))


def read_model_info(files: ModelFiles) -> ModelInfo:
    """The directory's model info, its tokenizer loaded (None when it ships none)."""
    return ModelInfo(files.args, files.eos_token_ids, load_tokenizer(files.path))


def _token_ids(value: int | list[int] | None) -> tuple[int, ...]:
    """An `eos_token_id` entry (one id, a list or None) as a tuple of ids."""
    return tuple(value) if isinstance(value, list) else (() if value is None else (value,))


def load_model(files: ModelFiles, max_positions: int, dtype: torch.dtype,
               device: torch.device) -> nn.Module:
    """Build `files.model_class` on `device` and load every safetensors shard into it
    (strict). Parameters the model ties in its constructor (a tied LM head) stay tied and
    need not be in the checkpoint."""
    with torch.device("meta"):
        model = files.model_class(files.args, max_positions)
    tied = _tied_parameters(model)
    model = model.to_empty(device=device)
    _rebuild_rotary(model, files.args, max_positions, device)
    state: dict[str, torch.Tensor] = {}
    for shard in sorted(files.path.glob("*.safetensors")):
        state.update(load_file(str(shard)))
    if not state:
        raise ValueError(f"model: no *.safetensors files in {files.path}")
    for alias in tied:
        state.pop(alias, None)
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [m for m in missing if m not in tied]
    if missing or unexpected:
        raise ValueError(f"model: weights do not match (missing {missing[:4]}, "
                         f"unexpected {unexpected[:4]})")
    for alias, owner in tied.items():
        module, _, name = alias.rpartition(".")
        setattr(model.get_submodule(module), name, model.get_parameter(owner))
    return model.to(dtype).eval()


def _tied_parameters(model: nn.Module) -> dict[str, str]:
    """Each parameter name that aliases an earlier-registered one -> that one's name
    (`to_empty` unties them)."""
    first: dict[int, str] = {}
    tied = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        owner = first.setdefault(id(param), name)
        if owner != name:
            tied[name] = owner
    return tied


def _rebuild_rotary(model: nn.Module, args: ModelArgs, max_positions: int,
                    device: torch.device) -> None:
    """Buffers are not in the checkpoint: rebuild every RoPE table for real on `device`."""
    for path, module in list(model.named_modules()):
        if isinstance(module, RotaryEmbedding):
            parent, _, name = path.rpartition(".")
            setattr(model.get_submodule(parent), name, RotaryEmbedding(
                args.head_dim, max_positions, args.rope_theta, args.rope_scaling).to(device))
