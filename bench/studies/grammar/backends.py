"""One adapter per constrained-decoding library, all with the same small interface, for the
grammar-cost study (`bench.studies.grammar.cost`).

An adapter is built from an HF fast tokenizer (the constructor does the library's tokenizer
setup, so timing the constructor times that setup) and then offers:

- `compile_schema(schema)`, `compile_any_object()`, `compile_tagged(schema, begin, end)`: the
  library's compiled grammar (for llguidance, a matcher constructed from the grammar string: its
  compilation happens in the `LLMatcher` constructor; for outlines-core, an `Index`).
- `new_matcher(compiled)`: a fresh per-request matcher.
- `fill_row(m, bitmask, row)`: write the allowed-token bitmask of `m` into `bitmask[row]`
  (an int32 [batch, ceil(V / 32)] CPU tensor; bit j of word w is token 32 * w + j).
- `fill_batch(ms, bitmask)`: the library's parallel/batched fill of rows 0..len(ms)-1, or
  `None` as `batch_fill` when the library has none.
- `advance(m, token) -> bool`: consume one token; False means rejected (the matcher may then be
  unusable). EOS is accepted only where the grammar is complete; after it the matcher is done.
- `reset(m)`, `can_end(m)` (the input so far is a complete match), `apply(logits, bitmask)`
  (the library's own torch helper: -inf where the bit is 0).
"""

from __future__ import annotations

import json
import re
from typing import Any

import torch

LIBRARIES = ("llguidance", "xgrammar", "outlines_core")


def make_backend(name: str, tokenizer: Any, threads: int) -> Any:
    """The adapter `name` (one of `LIBRARIES`) for `tokenizer`, using `threads` worker threads
    where the library has a thread pool. Raises ValueError for an unknown name."""
    classes = {"llguidance": LLGuidance, "xgrammar": XGrammar, "outlines_core": OutlinesCore}
    if name not in classes:
        raise ValueError(f"library: expected one of {LIBRARIES}, got {name!r}")
    return classes[name](tokenizer, threads)


def vocab_size(tokenizer: Any) -> int:
    """Size of the token-id space (the logits width): base vocabulary plus added tokens."""
    return len(tokenizer)


class LLGuidance:
    """llguidance: `LLTokenizer` from the HF tokenizer; a grammar string compiled by the
    `LLMatcher` constructor (no compile cache in the library: compiling again recompiles; a
    kept matcher can be `deep_copy`-ed instead); `LLExecutor` for the parallel fill."""

    version_module = "llguidance"
    cache_note = "none (the LLMatcher constructor recompiles)"
    gil_note = "releases (documented for unsafe_compute_mask_ptr)"

    def __init__(self, tokenizer: Any, threads: int) -> None:
        import llguidance
        import llguidance.hf
        import llguidance.torch

        self._ll, self._llt = llguidance, llguidance.torch
        self.tokenizer = llguidance.hf.from_tokenizer(tokenizer, n_vocab=vocab_size(tokenizer))
        self.eos = self.tokenizer.eos_token
        self._executor = llguidance.LLExecutor(num_threads=threads)
        self.batch_fill = self._fill_batch

    def _matcher(self, grammar: str) -> Any:
        matcher = self._ll.LLMatcher(self.tokenizer, grammar, log_level=0)
        if matcher.is_error():
            raise ValueError(f"llguidance: {matcher.get_error()}")
        return matcher

    def compile_schema(self, schema: dict) -> Any:
        return self._matcher(self._ll.LLMatcher.grammar_from_json_schema(schema))

    def compile_any_object(self) -> Any:
        return self._matcher(self._ll.LLMatcher.grammar_from_json_schema({"type": "object"}))

    def compile_tagged(self, schema: dict, begin: str, end: str) -> Any:
        lark = f"start: {json.dumps(begin)} args {json.dumps(end)}\nargs: %json {json.dumps(schema)}"
        return self._matcher(self._ll.LLMatcher.grammar_from_lark(lark))

    def new_matcher(self, compiled: Any) -> Any:
        return compiled.deep_copy()

    def fill_row(self, matcher: Any, bitmask: torch.Tensor, row: int) -> None:
        self._llt.fill_next_token_bitmask(matcher, bitmask, row)

    def _fill_batch(self, matchers: list, bitmask: torch.Tensor) -> None:
        self._llt.fill_next_token_bitmask_par(self._executor, [(m, i) for i, m in enumerate(matchers)], bitmask)

    def advance(self, matcher: Any, token: int) -> bool:
        return matcher.consume_token(token)

    def reset(self, matcher: Any) -> None:
        matcher.reset()

    def can_end(self, matcher: Any) -> bool:
        return matcher.is_accepting()

    def apply(self, logits: torch.Tensor, bitmask: torch.Tensor) -> None:
        self._llt.apply_token_bitmask_inplace(logits, bitmask)


class XGrammar:
    """xgrammar: `TokenizerInfo` plus a `GrammarCompiler` (with its compile cache);
    `GrammarMatcher` per request; `BatchGrammarMatcher` for the batched fill."""

    version_module = "xgrammar"
    cache_note = "GrammarCompiler cache hit"
    gil_note = "releases (tvm-ffi calls release the GIL by default)"

    def __init__(self, tokenizer: Any, threads: int) -> None:
        import xgrammar

        self._xgr = xgrammar
        self.info = xgrammar.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size(tokenizer))
        self.compiler = xgrammar.GrammarCompiler(self.info, max_threads=threads)
        self.eos = self.info.stop_token_ids[0]
        self._batch = xgrammar.BatchGrammarMatcher(max_threads=threads)
        self.batch_fill = self._fill_batch

    def compile_schema(self, schema: dict) -> Any:
        return self.compiler.compile_json_schema(schema)

    def compile_any_object(self) -> Any:
        return self.compiler.compile_json_schema({"type": "object"})

    def compile_tagged(self, schema: dict, begin: str, end: str) -> Any:
        return self.compiler.compile_structural_tag({
            "type": "structural_tag",
            "format": {"type": "tag", "begin": begin, "end": end,
                       "content": {"type": "json_schema", "json_schema": schema}},
        })

    def new_matcher(self, compiled: Any) -> Any:
        return self._xgr.GrammarMatcher(compiled)

    def fill_row(self, matcher: Any, bitmask: torch.Tensor, row: int) -> None:
        matcher.fill_next_token_bitmask(bitmask, row)

    def _fill_batch(self, matchers: list, bitmask: torch.Tensor) -> None:
        self._batch.batch_fill_next_token_bitmask(matchers, bitmask)

    def advance(self, matcher: Any, token: int) -> bool:
        return matcher.accept_token(token)

    def reset(self, matcher: Any) -> None:
        matcher.reset()

    def can_end(self, matcher: Any) -> bool:
        return matcher.is_completed()

    def apply(self, logits: torch.Tensor, bitmask: torch.Tensor) -> None:
        self._xgr.apply_token_bitmask_inplace(logits, bitmask)


class OutlinesCore:
    """outlines-core: a `Vocabulary` of token bytes (special tokens left out, EOS given apart);
    a JSON schema becomes a regex (`build_regex_from_schema`, nesting of free-form objects cut at
    depth 3) and then a token-level DFA (`Index`; no compile cache); `Guide` per request. No
    batched fill. EOS is no DFA transition: in a final state the mask allows EOS (besides any
    continuation), but `Guide.advance(eos)` raises, so `advance` checks `is_finished` instead."""

    version_module = "outlines_core"
    cache_note = "none (Index is rebuilt)"
    gil_note = "holds (pyo3 method without allow_threads)"

    def __init__(self, tokenizer: Any, threads: int) -> None:
        import outlines_core
        import outlines_core.kernels.torch

        self._oc, self._kernels = outlines_core, outlines_core.kernels.torch
        self.eos = tokenizer.eos_token_id
        self.vocabulary = outlines_core.Vocabulary(self.eos, token_bytes(tokenizer))
        self.batch_fill = None

    def _index(self, regex: str) -> Any:
        return self._oc.Index(regex, self.vocabulary)

    def compile_schema(self, schema: dict) -> Any:
        return self._index(self._oc.json_schema.build_regex_from_schema(json.dumps(schema)))

    def compile_any_object(self) -> Any:
        return self._index(self._oc.json_schema.build_regex_from_schema('{"type": "object"}'))

    def compile_tagged(self, schema: dict, begin: str, end: str) -> Any:
        body = self._oc.json_schema.build_regex_from_schema(json.dumps(schema))
        return self._index(re.escape(begin) + "(" + body + ")" + re.escape(end))

    def new_matcher(self, compiled: Any) -> Any:
        return self._oc.Guide(compiled)

    def fill_row(self, matcher: Any, bitmask: torch.Tensor, row: int) -> None:
        view = bitmask[row]
        matcher.write_mask_into(view.data_ptr(), view.numel(), view.element_size())

    def advance(self, matcher: Any, token: int) -> bool:
        if token == self.eos:
            return matcher.is_finished()
        try:
            matcher.advance(token, return_tokens=False)
        except ValueError:
            return False
        return True

    def reset(self, matcher: Any) -> None:
        matcher.reset()

    def can_end(self, matcher: Any) -> bool:
        return matcher.is_finished()

    def apply(self, logits: torch.Tensor, bitmask: torch.Tensor) -> None:
        self._kernels.apply_token_bitmask_inplace(logits, bitmask)


def token_bytes(tokenizer: Any) -> dict[bytes, list[int]]:
    """Byte string -> token ids of a byte-level BPE tokenizer (GPT-2 byte alphabet), added
    tokens (the special ones) left out. Raises ValueError for a token outside the alphabet."""
    decoder = {char: byte for byte, char in _bytes_to_unicode().items()}
    added = set(tokenizer.added_tokens_decoder)
    result: dict[bytes, list[int]] = {}
    for token, token_id in tokenizer.get_vocab().items():
        if token_id in added:
            continue
        try:
            data = bytes(decoder[char] for char in token)
        except KeyError:
            raise ValueError(f"token {token!r}: not a byte-level BPE token") from None
        result.setdefault(data, []).append(token_id)
    return result


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character table of byte-level BPE."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) \
        + list(range(ord("®"), ord("ÿ") + 1))
    chars, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            chars[byte] = chr(byte)
        else:
            chars[byte] = chr(256 + extra)
            extra += 1
    return chars


def apply_plain(logits: torch.Tensor, bitmask: torch.Tensor) -> None:
    """Plain-torch fallback of `apply`: unpack the bits and `masked_fill_` -inf (no compile)."""
    shifts = torch.arange(32, dtype=torch.int32, device=bitmask.device)
    blocked = (((bitmask.unsqueeze(-1) >> shifts) & 1) == 0).view(bitmask.shape[0], -1)
    logits.masked_fill_(blocked[:, : logits.shape[1]], float("-inf"))


def allowed(bitmask: torch.Tensor, row: int, token: int) -> bool:
    """Whether bit `token` of `bitmask[row]` is set."""
    return bool((int(bitmask[row, token // 32]) >> (token % 32)) & 1)

