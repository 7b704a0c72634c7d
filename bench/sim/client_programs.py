"""Programs as HTTP clients get them, for the simulator's `--program-ids`: `explicit` is the
driver's own (each trace program is one engine program, ended with its last call); here
are the other three.

- `named`: the trace's program ids, as a client that sends `X-Program-Id` on every call
  and never ends its programs gets them: a program starts with its first call and only
  the engine's `program_ttl` ends it; no `program_class`.
- `inferred`: the HTTP door's `--infer-programs` rule (`scheduler.program_inference`) on
  the calls' prompts. A call joins the program of the latest earlier call whose items its
  own extend, if that program is still active; else it starts a program of its own, which
  only the engine's `program_ttl` ends. One tenant for all (a door without auth), and no
  `program_class` (an unmodified client sends none).
- `none`: every call is a one-call program (what an unmodified chat client gets today).

A call's items stand for the messages a chat client would send: its prompt's token slices
between message boundaries, which are the end of the shared prefix (the system message) and,
for each call on its chain of first parents (the conversation it continues), where that
call's prompt ended and where its reply did. The items are made of the prompt's token ids,
never of program ids: two programs' calls join only if their contents agree (here only a
shared prefix can, and a prefix alone is no earlier call's whole prompt, so false joins
cannot happen on these traces: they need two conversations that open alike). A call joins
its parent when its prompt re-sends its parent's prompt: ShareGPT's and BFCL's do (prompt
= the history, reply included); LATS's are drawn apart from their parents' lengths, so a
LATS call joins only when its prompt happens to be the longer.

`summary()` counts each call: `correct` (in its program's first inferred program: the one
its first call started), `split` (a program of its own or a fragment: a join missed) or
`false_join` (a program another trace program started).
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence

from engine.errors import UnknownProgramError
from engine.llm_engine import LLMEngine
from scheduler.program_inference import ProgramInference

from bench.sim.trace import TraceCall, TraceProgram

PROGRAM_IDS = ("explicit", "named", "inferred", "none")


class ClientPrograms:
    """The engine program of each call of a `named`, `inferred` or `none` run (see the
    module)."""

    def __init__(self, mode: str, ttl: float) -> None:
        if mode not in PROGRAM_IDS[1:]:
            raise ValueError(f"program_ids: the driver's own is 'explicit'; here one of "
                             f"{PROGRAM_IDS[1:]}, got {mode!r}")
        self.mode = mode
        self.index = ProgramInference(ttl)
        self.counts = dict(calls=0, correct=0, split=0, false_join=0, programs=0)
        self._named: dict[int, str] = {}  # trace program index -> its engine program
        self._first: dict[int, str] = {}  # trace program index -> its first inferred program
        self._owner: dict[str, int] = {}  # inferred program -> the trace program that began it
        # per trace program, per call: its message boundaries, and where its prompt and its
        # reply end (its children's two boundaries more)
        self._bounds: dict[int, dict[str, tuple[tuple[int, ...], int, int]]] = {}

    def program_of(self, engine: LLMEngine, index: int, program: TraceProgram,
                   call: TraceCall, prompt: Sequence[int], now: float) -> str | None:
        """The engine program call `call` of trace program `index` runs in (None: a
        one-call program), started on `engine` if new."""
        if self.mode == "none":
            return None
        if self.mode == "named":
            if index not in self._named:
                self._named[index] = engine.start_program(program.program_id)
            return self._named[index]
        items = self._items(index, program, call, prompt)
        joined = self.index.join(None, items, now)
        if joined is not None:
            try:
                engine.get_program(joined)
            except UnknownProgramError:  # ended by its TTL
                joined = None
        program_id = joined or engine.start_program(f"inferred-{self.counts['programs']}")
        self._count(index, program_id, started=joined is None)
        self.index.record(None, items, program_id, now)
        return program_id

    def finished(self, index: int) -> None:
        """Trace program `index` has finished: forget its calls' boundaries, or its engine
        program (which lives on until its TTL)."""
        self._bounds.pop(index, None)
        self._named.pop(index, None)

    def summary(self) -> dict[str, int] | None:
        """The counts of an `inferred` run (see the module); None for the others."""
        return dict(self.counts) if self.mode == "inferred" else None

    def _items(self, index: int, program: TraceProgram, call: TraceCall,
               prompt: Sequence[int]) -> list[bytes]:
        calls = self._bounds.setdefault(index, {})
        if call.parents:
            parent_bounds, prompt_end, reply_end = calls[call.parents[0]]
            bounds = parent_bounds + (prompt_end, reply_end)
        else:
            bounds = (program.prefix_len,) if program.prefix_len else ()
        calls[call.call_id] = (bounds, call.prompt_len, call.prompt_len + call.output_len)
        cuts = sorted({b for b in bounds if 0 < b < len(prompt)})
        edges = [0, *cuts, len(prompt)]
        return [array("I", prompt[a:b]).tobytes() for a, b in zip(edges, edges[1:])]

    def _count(self, index: int, program_id: str, started: bool) -> None:
        counts = self.counts
        counts["calls"] += 1
        if started:
            counts["programs"] += 1
            self._owner[program_id] = index
            first = self._first.setdefault(index, program_id)
        else:
            first = self._first.get(index)
        if self._owner[program_id] != index:
            counts["false_join"] += 1
        elif program_id == first:
            counts["correct"] += 1
        else:
            counts["split"] += 1
