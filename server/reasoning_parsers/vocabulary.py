"""The startup check of `--reasoning-parser`: the model's tokenizer has the format's markers.

Like vLLM (which refuses a think parser whose `<think>`/`</think>` are not in the vocabulary),
each marker must be one token of the vocabulary; and since the server decodes outputs with
special tokens skipped, that token must decode to the marker (a special token would vanish
from the text before the parser could see it)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from server.reasoning_parsers import reasoning_parser_class

if TYPE_CHECKING:
    from engine.tokenizer import Tokenizer


def check_vocabulary(name: str, tokenizer: Tokenizer | None) -> None:
    """Nothing when reasoning parser `name` can read this model's outputs; ValueError naming
    the parser and the first marker missing otherwise (`tokenizer` None: the model has none,
    so its outputs have no text)."""
    markers = reasoning_parser_class(name).markers
    if tokenizer is None:
        raise ValueError(f"reasoning parser {name!r} reads output text, and the model has no "
                         f"tokenizer")
    vocabulary = tokenizer.hf_tokenizer.get_vocab()
    for marker in markers:
        token_id = vocabulary.get(marker)
        if token_id is None:
            raise ValueError(f"reasoning parser {name!r} needs {marker!r} as one token, and "
                             f"the model's vocabulary has no such token")
        if tokenizer.decode([token_id]) != marker:
            raise ValueError(f"reasoning parser {name!r} needs {marker!r} in the output text, "
                             f"and the model's tokenizer drops it when decoding (a special "
                             f"token)")
