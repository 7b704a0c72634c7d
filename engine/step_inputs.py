"""One step's model inputs, flattened on the host from a SchedulePlan.

Plain Python lists, so rank 0 can send the same step to every tensor-parallel worker (pickled)
and each rank builds its own device tensors (`tensors`). Decodes come first, then prefill
chunks, as AttentionMetadata expects.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.models.attention import AttentionMetadata
from scheduler.plan import SchedulePlan


@dataclass(frozen=True)
class StepInputs:
    """`swap_out` / `swap_in`: the plan's block copies; token, position and slot per token;
    the decode and prefill block tables, lengths and query starts; `sample_rows`: the token
    rows whose logits are sampled, in chunk order."""

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
                   [c.start + c.num_tokens for c in prefill], sample_rows)

    @property
    def has_tokens(self) -> bool:
        return bool(self.token_ids)

    def tensors(self, device: torch.device
                ) -> tuple[torch.Tensor, torch.Tensor, AttentionMetadata, torch.Tensor]:
        """(input_ids, positions, attention metadata, sample_rows) on `device`."""

        def tensor(values, dtype=torch.int32):
            return torch.tensor(values, dtype=dtype, device=device)

        meta = AttentionMetadata(
            slot_mapping=tensor(self.slots, torch.long),
            num_decode_tokens=self.num_decode,
            decode_block_tables=_table(self.decode_tables, device),
            decode_context_lens=tensor(self.decode_lens),
            prefill_block_tables=_table(self.prefill_tables, device),
            prefill_query_start_loc=tensor(self.prefill_starts),
            prefill_context_lens=tensor(self.prefill_lens),
        )
        return (tensor(self.token_ids, torch.long), tensor(self.positions, torch.long), meta,
                tensor(self.sample_rows, torch.long))


def _table(tables: list[list[int]], device: torch.device) -> torch.Tensor:
    """Block tables padded with the null block 0 to one width, int32 [rows, width]."""
    width = max((len(t) for t in tables), default=0)
    rows = [t + [0] * (width - len(t)) for t in tables]
    return torch.tensor(rows, dtype=torch.int32, device=device).reshape(len(tables), width)
