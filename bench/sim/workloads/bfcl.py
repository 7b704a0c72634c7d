"""BFCL workload: real multi-turn function-calling entries of the PyPI package `bfcl-eval`.

Entries come from `bfcl_eval/data/BFCL_v*_multi_turn_{base,miss_param}.json`, each with its
ground truth from `data/possible_answer/` (the function calls that solve each user turn), taken in
the order of `random.Random(seed).shuffle` (cycled when more programs are asked for than there
are entries; program ids stay unique). One entry = one sequential program.

The entries have 3-5 user turns, while the paper counts 10.75 calls per program: its agent runs a
tool loop inside each user turn. We model that loop from the ground truth: a user turn solved by k
function calls becomes k + 1 LLM calls, each of the first k emitting one function call, the last
one answering in text (a turn with empty ground truth, e.g. a missing parameter, is a single
call asking back). After each function call the tool runs: the next LLM call has an external
delay drawn uniformly from TOOL_DELAY_S and the tool's result adds a message of
uniform TOOL_RESULT_TOKENS tokens to the history. Output lengths are drawn (the real model's
replies are not in the data): lognormal with mean OUTPUT_MEAN (the paper's 34) clipped to
[OUTPUT_MIN, OUTPUT_MAX].

Prompt = system message (the JSON docs of the entry's involved classes' functions, less its
excluded ones) + the history so far, counted under the SmolLM2 tokenizer incrementally (see
`ChatOverhead`). All calls are chained: each call's parent is the previous one. Entries with
the same docs (400 entries have 32 distinct sets) share the system message: the program's
`prefix_key` names the docs and `prefix_len` is the system message's length.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.sim.trace import Trace, TraceCall, TraceProgram
from bench.sim.workloads.common import (ChatOverhead, check_num_programs, load_tokenizer,
                                        lognormal_int, measure_chat_overhead, token_counts,
                                        with_arrivals)

WORKLOAD = "bfcl"
CATEGORIES = ("multi_turn_base", "multi_turn_miss_param")
OUTPUT_MEAN = 34.0
OUTPUT_SIGMA = 0.6
OUTPUT_MIN = 4
OUTPUT_MAX = 512
TOOL_DELAY_S = (0.1, 1.0)
TOOL_RESULT_TOKENS = (20, 200)


@dataclass(frozen=True)
class Entry:
    """One BFCL multi-turn entry: its user turns, ground-truth call count per turn, and the
    function docs (JSON text) it may use."""

    entry_id: str
    user_turns: tuple[tuple[str, ...], ...]
    calls_per_turn: tuple[int, ...]
    function_docs: str


def data_dir() -> Path:
    import bfcl_eval

    return Path(bfcl_eval.__file__).parent / "data"


def load_entries() -> list[Entry]:
    """All entries of CATEGORIES, in file order. Raises FileNotFoundError when a file is missing."""
    from bfcl_eval.constants.executable_backend_config import MULTI_TURN_FUNC_DOC_FILE_MAPPING

    root = data_dir()
    docs = {
        cls: [json.loads(line) for line in (root / "multi_turn_func_doc" / name).read_text().splitlines() if line.strip()]
        for cls, name in MULTI_TURN_FUNC_DOC_FILE_MAPPING.items()
    }
    entries: list[Entry] = []
    for category in CATEGORIES:
        questions = _read_jsonl(_one_file(root, category))
        answers = {a["id"]: a["ground_truth"] for a in _read_jsonl(_one_file(root / "possible_answer", category))}
        for q in questions:
            excluded = set(q.get("excluded_function") or ())
            functions = [f for cls in q["involved_classes"] for f in docs[cls] if f["name"] not in excluded]
            truth = answers.get(q["id"], [[]] * len(q["question"]))
            entries.append(
                Entry(
                    entry_id=q["id"],
                    user_turns=tuple(tuple(m["content"] for m in turn if m["role"] == "user") for turn in q["question"]),
                    calls_per_turn=tuple(len(t) for t in truth),
                    function_docs=json.dumps(functions),
                )
            )
    return entries


def _one_file(folder: Path, category: str) -> Path:
    matches = sorted(folder.glob(f"BFCL_v*_{category}.json"))
    if not matches:
        raise FileNotFoundError(f"no BFCL_v*_{category}.json in {folder}")
    return matches[-1]


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def generate(
    num_programs: int,
    seed: int,
    rate: float,
    *,
    tokenizer: Any = None,
    entries: list[Entry] | None = None,
) -> Trace:
    """`num_programs` BFCL entries as programs with Poisson(`rate`) arrivals, deterministic per
    `seed`. `tokenizer` defaults to `load_tokenizer()`, `entries` to `load_entries()`."""
    check_num_programs(num_programs)
    tokenizer = load_tokenizer() if tokenizer is None else tokenizer
    entries = load_entries() if entries is None else entries
    if not entries:
        raise ValueError("entries: empty")
    overhead = measure_chat_overhead(tokenizer)
    rng = random.Random(seed)
    order = list(range(len(entries)))
    rng.shuffle(order)
    doc_tokens: dict[str, int] = {}
    programs = []
    for i in range(num_programs):
        entry = entries[order[i % len(order)]]
        if entry.function_docs not in doc_tokens:
            doc_tokens[entry.function_docs] = token_counts(tokenizer, [entry.function_docs])[0]
        docs = doc_tokens[entry.function_docs]
        calls = _entry_calls(entry, docs, tokenizer, overhead, rng)
        programs.append(TraceProgram(f"{WORKLOAD}-{i}", 0.0, calls, WORKLOAD,
                                     prefix_key=_docs_key(entry.function_docs),
                                     prefix_len=overhead.system_tokens(docs)))
    return with_arrivals(programs, seed, rate)


def _docs_key(function_docs: str) -> str:
    """Entries with the same function docs have the same system prompt."""
    return "bfcl-docs-" + hashlib.sha1(function_docs.encode()).hexdigest()[:16]


def _entry_calls(
    entry: Entry, docs_tokens: int, tokenizer: Any, overhead: ChatOverhead, rng: random.Random
) -> tuple[TraceCall, ...]:
    user_tokens = token_counts(tokenizer, [text for turn in entry.user_turns for text in turn])
    history = overhead.system_tokens(docs_tokens)
    calls: list[TraceCall] = []
    next_user = 0

    def add_call(delay: float) -> int:
        output_len = lognormal_int(rng, OUTPUT_MEAN, OUTPUT_SIGMA, OUTPUT_MIN, OUTPUT_MAX)
        parents = (calls[-1].call_id,) if calls else ()
        calls.append(TraceCall(f"c{len(calls)}", history + overhead.generation, output_len, parents, delay))
        return overhead.per_message + output_len

    for turn, function_calls in zip(entry.user_turns, entry.calls_per_turn):
        for _ in turn:
            history += overhead.per_message + user_tokens[next_user]
            next_user += 1
        delay = 0.0
        for _ in range(function_calls):
            history += add_call(delay)
            history += overhead.per_message + rng.randint(*TOOL_RESULT_TOKENS)
            delay = rng.uniform(*TOOL_DELAY_S)
        history += add_call(delay)
    return tuple(calls)
