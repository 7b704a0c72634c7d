"""One step's model inputs, flattened on the host from a SchedulePlan.

Plain Python lists, so rank 0 can send the same step to every tensor-parallel worker (pickled)
and each rank builds its own device tensors (`tensors`). Decodes come first, then prefill
chunks, as AttentionMetadata expects.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.models.attention import AttentionMetadata
from engine.staging import HostStaging
from scheduler.plan import ScheduledChunk, SchedulePlan


@dataclass(frozen=True)
class StepInputs:
    """`swap_out` / `swap_in`: the plan's block copies; token, position and slot per token;
    the decode and prefill block tables, lengths and query starts; `sample_rows`: the token
    rows whose logits are sampled, in chunk order. `prompt_rows`: the token rows whose logits
    score a prompt token (calls asking for prompt logprobs only: `Call.prompt_logprob_positions`),
    in chunk order; `prompt_targets` and `prompt_top`: the token each scores and how many top
    alternatives its call wants; `prompt_counts`: how many of them each chunk has (all four
    empty when no chunk's call asks)."""

    swap_out: list[tuple[int, int]]
    swap_in: list[tuple[int, int]]
    token_ids: list[int]
    positions: list[int]
    slots: list[int]
    num_decode: int
    decode_tables: list[list[int]]
    decode_lens: list[int]
    prefill_tables: list[list[int]]
    prefill_starts: list[int]
    prefill_lens: list[int]
    sample_rows: list[int]
    prompt_rows: list[int]
    prompt_targets: list[int]
    prompt_top: list[int]
    prompt_counts: list[int]

    @classmethod
    def of(cls, plan: SchedulePlan, block_size: int) -> "StepInputs":
        ids: list[int] = []
        pos: list[int] = []
        slots: list[int] = []
        sample_rows: list[int] = []
        decode, prefill = [], []
        for c in plan.chunks:
            start, end = c.start, c.start + c.num_tokens
            ids.extend(c.call.all_token_ids[start:end])
            pos.extend(range(start, end))
            table = c.block_table
            slots.extend(table[p // block_size] * block_size + p % block_size
                         for p in range(start, end))
            (decode if c.is_decode else prefill).append(c)
            if c.samples:
                sample_rows.append(len(ids) - 1)
        starts = [0]
        for c in prefill:
            starts.append(starts[-1] + c.num_tokens)
        return cls(list(plan.swap_out), list(plan.swap_in), ids, pos, slots, len(decode),
                   [c.block_table for c in decode], [c.start + 1 for c in decode],
                   [c.block_table for c in prefill], starts,
                   [c.start + c.num_tokens for c in prefill], sample_rows,
                   *_prompt_scoring(plan.chunks))

    @property
    def has_tokens(self) -> bool:
        return bool(self.token_ids)

    def tensors(self, device: torch.device, staging: HostStaging | None = None
                ) -> tuple[torch.Tensor, torch.Tensor, AttentionMetadata, torch.Tensor]:
        """(input_ids, positions, attention metadata, sample_rows) on `device`: built there
        directly, or through `staging` in one transfer (what a CUDA runner does)."""
        decode_width = max(map(len, self.decode_tables), default=0)
        prefill_width = max(map(len, self.prefill_tables), default=0)
        long, int32 = torch.long, torch.int32
        parts = [(self.token_ids, long), (self.positions, long), (self.slots, long),
                 (self.sample_rows, long), (_padded(self.decode_tables, decode_width), int32),
                 (self.decode_lens, int32), (_padded(self.prefill_tables, prefill_width), int32),
                 (self.prefill_starts, int32), (self.prefill_lens, int32)]
        if staging is None:
            made = [torch.tensor(values, dtype=dtype, device=device) for values, dtype in parts]
        else:
            made = [t.to(dtype) for t, (_, dtype) in
                    zip(staging.upload([values for values, _ in parts]), parts)]
        ids, pos, slots, rows, dt, dl, pt, ps, pl = made
        meta = AttentionMetadata(
            slot_mapping=slots,
            num_decode_tokens=self.num_decode,
            decode_block_tables=dt.view(len(self.decode_tables), decode_width),
            decode_context_lens=dl,
            prefill_block_tables=pt.view(len(self.prefill_tables), prefill_width),
            prefill_query_start_loc=ps,
            prefill_context_lens=pl,
        )
        return ids, pos, meta, rows


def _prompt_scoring(chunks: list[ScheduledChunk]
                    ) -> tuple[list[int], list[int], list[int], list[int]]:
    """The `prompt_rows`, `prompt_targets`, `prompt_top` and `prompt_counts` of a step's
    `chunks` (their calls are engine Calls); all empty when no chunk's call asks."""
    if all(c.call.params.prompt_logprobs is None for c in chunks):
        return [], [], [], []
    rows: list[int] = []
    targets: list[int] = []
    top: list[int] = []
    counts: list[int] = []
    first_row = 0  # the row of the chunk's first token
    for c in chunks:
        positions = c.call.prompt_logprob_positions(c.start, c.start + c.num_tokens)
        if positions:
            offset = first_row - c.start  # position p is row p + offset
            rows.extend(range(positions.start + offset, positions.stop + offset))
            targets.extend(c.call.all_token_ids[positions.start + 1:positions.stop + 1])
            top.extend([c.call.params.prompt_logprobs] * len(positions))
        counts.append(len(positions))
        first_row += c.num_tokens
    return rows, targets, top, counts


def _padded(tables: list[list[int]], width: int) -> list[int]:
    """Block tables padded with the null block 0 to `width`, flattened row by row."""
    return [block for t in tables for block in (*t, *[0] * (width - len(t)))]
