"""Incremental detokenization and stop strings (engine/detokenizer.py): the text equals the
full decode after every token, stop strings are found where they start (across token
boundaries; the earliest of several wins), the limits on stop lists hold, and the decoding work
per token is bounded whatever the output's length."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from engine import LLM, SamplingParams
from engine.detokenizer import (MAX_HELD_REPLACEMENTS, REPLACEMENT, WINDOW_TOKENS,
                                IncrementalDetokenizer, StopPrefixTracker, StopStringMatcher,
                                StopStringScanner)
from engine.sampling_params import MAX_STOP_STRING_CHARS, MAX_STOP_STRINGS, MAX_STOP_TOKEN_IDS
from engine.tokenizer import load_tokenizer

# Accents, CJK, emoji (4-byte, ZWJ sequences, flags), typographic punctuation: byte-level BPE
# splits many of these characters across tokens.
MULTIBYTE = ("Café au lait, naïve façade — Ünïcödé ñ ß ø. 😀🎉 👩‍👩‍👧 🇫🇷🇯🇵 "
             "日本語のテキスト、中文文本。한국어 문장… Ωμέγα ∑∫√ “quotes” ‘s’ ✓ 🦄🧪")


@pytest.fixture(scope="module")
def word_tokenizer(tiny_llama_dir):
    return load_tokenizer(Path(tiny_llama_dir))  # token i is the word "w{i}"; 0-2 special


@pytest.fixture(scope="module")
def smollm2_tokenizer():
    from engine.models.smollm2 import ensure_smollm2_dir

    return load_tokenizer(ensure_smollm2_dir())  # setup.sh installs the GGUF package


class CountingDecode:
    """Wraps a decode function; records the number of ids of each call."""

    def __init__(self, decode):
        self.decode, self.sizes = decode, []

    def __call__(self, ids):
        self.sizes.append(len(ids))
        return self.decode(ids)


def word_ids(n: int, seed: int) -> list[int]:
    """Random word-tokenizer ids, specials (0-2, decoded to nothing) included, with a long
    run of specials in the middle."""
    rng = random.Random(seed)
    ids = [rng.randrange(0, 384) for _ in range(n)]
    return ids[:n // 2] + [2] * 5 * WINDOW_TOKENS + ids[n // 2:]


def assert_equals_full_decode(tokenizer, ids: list[int]) -> int:
    """Push `ids` one at a time: after every token the text equals the full decode less its
    trailing U+FFFD (an incomplete character). Returns how many steps held one back."""
    counting = CountingDecode(tokenizer.decode)
    detok = IncrementalDetokenizer(counting)
    pieces, held = [], 0
    for i, token in enumerate(ids):
        pieces.append(detok.push([token]))
        full = tokenizer.decode(ids[:i + 1])
        assert detok.text == "".join(pieces) == full.rstrip(REPLACEMENT), i
        held += full.endswith(REPLACEMENT)
    assert detok.text == tokenizer.decode(ids)
    assert detok.num_tokens == len(ids)
    assert max(counting.sizes) <= 2 * WINDOW_TOKENS  # the window slid as it should
    return held


def test_word_tokenizer_text_equals_full_decode(word_tokenizer):
    for seed in range(3):
        assert_equals_full_decode(word_tokenizer, word_ids(200, seed))


def test_smollm2_multibyte_text_equals_full_decode(smollm2_tokenizer):
    ids = smollm2_tokenizer.encode(MULTIBYTE)
    assert smollm2_tokenizer.decode(ids) == MULTIBYTE
    held = assert_equals_full_decode(smollm2_tokenizer, ids)
    assert held > 0  # some characters really were split across tokens
    # Pushed several tokens at a time, with special tokens interleaved, the text is the same.
    special = smollm2_tokenizer.encode("<|im_end|>")
    assert len(special) == 1 and smollm2_tokenizer.decode(special) == ""
    detok, rng, i = IncrementalDetokenizer(smollm2_tokenizer.decode), random.Random(0), 0
    while i < len(ids):
        n = rng.randrange(1, 4)
        detok.push(ids[i:i + n] + special * rng.randrange(0, 2))
        i += n
        assert detok.text == smollm2_tokenizer.decode(ids[:i]).rstrip(REPLACEMENT)
    assert detok.text == MULTIBYTE


def test_undecodable_bytes_do_not_stall_it():
    """A byte-level decode (one token a byte) of bytes that no later token completes: the text
    keeps ending in U+FFFD, yet all but the last 3 are handed out and the window stays small;
    characters split across tokens, before and after, come out whole."""
    def decode(ids):
        return bytes(ids).decode("utf-8", errors="replace")

    sizes = []
    detok = IncrementalDetokenizer(lambda ids: sizes.append(len(ids)) or decode(ids))
    ids = list("é😀".encode()) + [0x80] * 100 + list("ok é 日本 😀".encode())
    for i, token in enumerate(ids):
        detok.push([token])
        full = decode(ids[:i + 1])
        held = len(full) - len(full.rstrip(REPLACEMENT))
        assert detok.text == full[:len(full) - min(held, MAX_HELD_REPLACEMENTS)], i
    assert detok.text == decode(ids)
    assert max(sizes) <= 2 * WINDOW_TOKENS


# ----- stop strings ----------------------------------------------------------------------
def first_stop(texts: list[str], stops: tuple[str, ...]) -> tuple[int, int] | None:
    """Reference: (step, start) of the first step whose text holds a stop string, the start
    of the earliest one then."""
    for step, text in enumerate(texts):
        hits = [i for i in (text.find(s) for s in stops) if i >= 0]
        if hits:
            return step, min(hits)
    return None


def scan(tokenizer, ids: list[int], stops: tuple[str, ...]) -> tuple[int, int] | None:
    scanner = StopStringScanner(tokenizer.decode, stops)
    for step, token in enumerate(ids):
        if (at := scanner.push([token])) is not None:
            return step, at
    return None


def test_stop_strings_across_token_boundaries(word_tokenizer, smollm2_tokenizer):
    rng = random.Random(1)
    for tokenizer, ids in ((word_tokenizer, word_ids(120, 7)),
                           (smollm2_tokenizer, smollm2_tokenizer.encode(MULTIBYTE * 2))):
        texts = [tokenizer.decode(ids[:i + 1]).rstrip(REPLACEMENT) for i in range(len(ids))]
        final = texts[-1]
        spanning = 0
        for _ in range(60):
            stops = []
            for _ in range(rng.randrange(1, 4)):
                start = rng.randrange(len(final) - 2)
                stops.append(final[start:start + rng.randrange(1, 12)])
            stops = tuple(stops)
            expected = first_stop(texts, stops)
            assert scan(tokenizer, ids, stops) == expected, stops
            step, at = expected
            cut = texts[step]
            spanning += any(s in cut[at:] and s not in tokenizer.decode([ids[step]])
                            for s in stops)
        assert spanning > 10  # most of them did span tokens
        assert scan(tokenizer, ids, ("not in the text",)) is None


def test_the_earliest_of_several_stop_strings_wins(word_tokenizer):
    ids = [5, 17, 33, 90, 41]  # "w5 w17 w33 w90 w41"
    # Both appear at the fourth token; the one that starts earlier wins.
    assert scan(word_tokenizer, ids, ("w33 w90", "w17 w33 w9")) == (3, 3)
    # One appears first (third token): it wins though another would start earlier later.
    assert scan(word_tokenizer, ids, ("w5 w17 w33 w90", "w33")) == (2, 7)
    matcher = StopStringMatcher(("bc", "abcd"))
    assert matcher.push("xab") is None
    assert matcher.push("c") == 2  # "bc" appeared first; the match then stays
    assert matcher.push("d") == 2
    assert StopStringMatcher(("bc", "abcd")).push("xabcd") == 1  # together: the earliest


def test_engine_cuts_before_the_earliest_stop_string(tiny_llama_dir):
    llm = LLM(tiny_llama_dir, block_size=8, num_kv_blocks=64)
    prompt = [5, 17, 33, 90]
    greedy = llm.generate(prompt, SamplingParams(max_tokens=10, ignore_eos=True))[0]
    words = greedy.text.split(" ")
    assert words == [f"w{t}" for t in greedy.token_ids]
    texts = [" ".join(words[:i + 1]) for i in range(len(words))]
    # Two stop strings that first appear at the same token j: one across tokens j-1 and j
    # (a word's end, the next one's start), and a later-starting one inside token j.
    for j in range(3, len(words)):
        stops = (words[j][:2], f"{words[j - 1][1:]} {words[j][:2]}")
        if first_stop(texts, stops) == (j, texts[j].find(stops[1])):
            break
    else:
        pytest.fail("no token to build the stop strings on")
    for max_tokens in (10, j + 1):  # also on the last allowed token
        out = llm.generate(prompt, SamplingParams(max_tokens=max_tokens, ignore_eos=True,
                                                  stop=stops))[0]
        assert out.finish_reason == "stop"
        assert out.token_ids == greedy.token_ids[:j + 1]
        assert out.text == texts[j][:texts[j].find(stops[1])] == " ".join(words[:j - 1]) + " w"
    llm.engine.check_integrity()


# ----- limits ------------------------------------------------------------------------------
def test_limits_on_stop_lists():
    SamplingParams(stop=("x" * MAX_STOP_STRING_CHARS,) * MAX_STOP_STRINGS,
                   stop_token_ids=tuple(range(MAX_STOP_TOKEN_IDS)))  # the largest allowed
    bad = {
        "stop": [dict(stop=("a",) * (MAX_STOP_STRINGS + 1)),
                 dict(stop=("x" * (MAX_STOP_STRING_CHARS + 1),)),
                 dict(stop=("ok", "")), dict(stop=("ok", 3))],
        "stop_token_ids": [dict(stop_token_ids=tuple(range(MAX_STOP_TOKEN_IDS + 1)))],
    }
    for name, cases in bad.items():
        for kwargs in cases:
            with pytest.raises(ValueError, match=f"^{name}:"):
                SamplingParams(**kwargs)
    assert SamplingParams(stop="one").stop == ("one",)


# ----- cost --------------------------------------------------------------------------------
def decode_work_per_token(tokenizer, ids: list[int], stops: tuple[str, ...]) -> list[int]:
    """Ids decoded for each pushed token by a stop-string scanner (no stop ever matches)."""
    counting = CountingDecode(tokenizer.decode)
    scanner, work = StopStringScanner(counting, stops), []
    for token in ids:
        before = sum(counting.sizes)
        assert scanner.push([token]) is None
        work.append(sum(counting.sizes) - before)
        assert len(counting.sizes) <= 2 * len(work)  # at most two decode calls a token
        assert max(counting.sizes) <= 2 * WINDOW_TOKENS
    return work


def test_decode_work_per_token_is_bounded(word_tokenizer, smollm2_tokenizer):
    stops = ("\x00" * MAX_STOP_STRING_CHARS,) * MAX_STOP_STRINGS
    bound = 3 * WINDOW_TOKENS  # a window of under 2 * WINDOW_TOKENS, and a slide's decode
    for tokenizer, short, long in (
            (word_tokenizer, word_ids(100, 3), word_ids(3000, 4)),
            (smollm2_tokenizer, smollm2_tokenizer.encode(MULTIBYTE),
             smollm2_tokenizer.encode(MULTIBYTE * 30))):
        assert len(long) > 10 * len(short)
        work_short = decode_work_per_token(tokenizer, short, stops)
        work_long = decode_work_per_token(tokenizer, long, stops)
        # The same small window whatever the length: the worst step of a long output costs
        # no more than the worst of a short one, and the total grows linearly.
        assert max(work_long) <= max(work_short) <= bound
        assert sum(work_long) <= bound * len(long)


def test_engine_never_decodes_the_whole_output_per_step(tiny_llama_dir):
    llm = LLM(tiny_llama_dir, block_size=8, num_kv_blocks=64)
    engine = llm.engine
    counting = CountingDecode(engine.tokenizer.decode)
    engine.tokenizer.decode = counting
    n = 200
    out = llm.generate([5, 6], SamplingParams(max_tokens=n, ignore_eos=True,
                                              stop=("never appears",)))[0]
    assert out.finish_reason == "length" and len(out.token_ids) == n
    # Per step a window of a few tokens; once at the finish the whole output (the final text).
    assert sorted(counting.sizes)[-1] == n
    assert sorted(counting.sizes)[-2] <= 2 * WINDOW_TOKENS
    assert len(counting.sizes) <= 1.2 * n
    # A call without stop strings decodes only once, at the finish.
    counting.sizes.clear()
    llm.generate([5, 6], SamplingParams(max_tokens=50, ignore_eos=True))
    assert counting.sizes == [50]


def test_stop_prefix_tracker_matches_brute_force():
    rng = random.Random(5)

    def longest_tail(text, stops):
        return max((k for s in stops for k in range(1, len(s)) if text.endswith(s[:k])),
                   default=0)

    for _ in range(300):
        stops = tuple("".join(rng.choice("ab") for _ in range(rng.randrange(1, 7)))
                      for _ in range(rng.randrange(1, 4)))
        tracker, text, first = StopPrefixTracker(stops), "", None
        for _ in range(rng.randrange(1, 8)):
            new = "".join(rng.choice("abc") for _ in range(rng.randrange(0, 6)))
            text += new
            assert tracker.push(new) == longest_tail(text, stops), (stops, text)
            if first is None:
                hits = [i for i in (text.find(s) for s in stops) if i >= 0]
                first = min(hits) if hits else None
            assert tracker.match == first, (stops, text)
