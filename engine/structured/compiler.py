"""Output grammars compiled for one tokenizer (llguidance), cached by their
`StructuredOutput`: each call gets a fresh copy of its grammar's start state."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

from engine.structured.spec import StructuredOutput
from engine.structured.state import GrammarState

# Compact JSON: no whitespace between tokens, so a weak model cannot loop in whitespace.
COMPACT_JSON = {"whitespace_flexible": False, "item_separator": ",", "key_separator": ":"}
DEFAULT_CACHE_SIZE = 256


class GrammarCompiler:
    """Compiles `StructuredOutput`s against `hf_tokenizer` (a transformers fast tokenizer)
    for a model whose logits have `vocab_size` columns, keeping the `cache_size` most
    recently used compiled start states. Thread-safe: `state` may be called from any thread
    (a server compiles off the engine thread)."""

    def __init__(self, hf_tokenizer: Any, vocab_size: int,
                 cache_size: int = DEFAULT_CACHE_SIZE) -> None:
        import llguidance
        import llguidance.hf

        self._llguidance = llguidance
        self.vocab_size = vocab_size
        try:
            self._tokenizer = llguidance.hf.from_tokenizer(hf_tokenizer, n_vocab=vocab_size)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:  # tokens that are not bytes (word-level...), or over
            # the library's 1 KiB: it panics, and a Rust panic is a BaseException
            raise ValueError(f"structured: this model's tokenizer cannot drive constrained "
                             f"decoding ({_one_line(str(exc))})") from None
        self._cache: OrderedDict[StructuredOutput, Any] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()

    def state(self, spec: StructuredOutput) -> GrammarState:
        """A fresh start state of `spec`'s grammar; ValueError naming `json_schema` when the
        schema cannot be compiled (an unknown type, an unsupported keyword...)."""
        with self._lock:
            start = self._cache.get(spec)
            if start is not None:
                self._cache.move_to_end(spec)
                return GrammarState(start.deep_copy())
        start = self._compile(spec)
        with self._lock:
            self._cache[spec] = start
            if len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
            return GrammarState(start.deep_copy())

    def _compile(self, spec: StructuredOutput) -> Any:
        matcher_class = self._llguidance.LLMatcher
        grammar = matcher_class.grammar_from_json_schema(spec.json_schema,
                                                         overrides=COMPACT_JSON)
        matcher = matcher_class(self._tokenizer, grammar, log_level=0)
        if matcher.is_error():
            raise ValueError(f"json_schema: cannot be compiled: "
                             f"{_one_line(matcher.get_error())}")
        return matcher

    @property
    def num_cached(self) -> int:
        with self._lock:
            return len(self._cache)


def _one_line(text: str, limit: int = 300) -> str:
    """A library's (multi-line) error as one line of at most `limit` characters."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."
