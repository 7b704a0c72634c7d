"""Runs a SchedulePlan on a real Llama model over the paged KV cache (CPU or CUDA)."""

from __future__ import annotations

import time

import torch

from engine.config import EngineConfig
from engine.executor import StepResult
from engine.kv_spec import kv_cache_spec
from engine.loader import ModelFiles, load_model
from engine.models.attention import AttentionMetadata
from engine.sampler import Sampler
from kvcache.kv_tensor import allocate_kv_cache, layer_kv
from kvcache.swap import BulkSwapper
from scheduler.plan import SchedulePlan, ScheduledChunk


class ModelRunner:
    """Owns the model weights, the block-major KV cache (of `kv_spec`, the engine's one
    spec: `engine.kv_spec`) and the host swap pool."""

    def __init__(self, config: EngineConfig, files: ModelFiles, max_model_len: int) -> None:
        self.device = torch.device(config.device)
        self.dtype = getattr(torch, config.dtype)
        self.block_size = config.block_size
        self.model = load_model(files, max_model_len, self.dtype, self.device)
        self.kv_spec = kv_cache_spec(files.args, config)
        self.kv_cache = allocate_kv_cache(self.kv_spec, self.device)
        self.kv_layers = [layer_kv(self.kv_cache, i) for i in range(self.kv_spec.num_layers)]
        self.swapper = BulkSwapper(self.kv_cache, config.num_host_blocks)
        self.sampler = Sampler(config.seed)

    @property
    def num_kv_blocks(self) -> int:
        return self.kv_spec.num_blocks

    @torch.inference_mode()
    def execute(self, plan: SchedulePlan) -> StepResult:
        started = time.perf_counter()
        self.swapper.swap_out(plan.swap_out)
        self.swapper.swap_in(plan.swap_in)
        swap_seconds = time.perf_counter() - started if plan.swap_out or plan.swap_in else 0.0
        if not plan.chunks:
            return StepResult([], swap_seconds)
        input_ids, positions, meta, sample_rows = self._prepare(plan.chunks)
        hidden = self.model(input_ids, positions, self.kv_layers, meta)
        logits = self.model.logits(hidden[sample_rows])
        sampling = [c for c in plan.chunks if c.samples]
        sampled = iter(self.sampler(logits, [c.call.params for c in sampling],
                                    [c.call.num_output_tokens for c in sampling]))
        return StepResult([next(sampled) if c.samples else None for c in plan.chunks],
                          swap_seconds)

    def _prepare(self, chunks: list[ScheduledChunk]
                 ) -> tuple[torch.Tensor, torch.Tensor, AttentionMetadata, torch.Tensor]:
        """Flatten the chunks (decodes first) into token, position and slot tensors."""
        bs = self.block_size
        ids: list[int] = []
        pos: list[int] = []
        slots: list[int] = []
        sample_rows: list[int] = []
        decode, prefill = [], []
        for c in chunks:
            start, end = c.start, c.start + c.num_tokens
            ids.extend(c.call.all_token_ids[start:end])
            pos.extend(range(start, end))
            table = c.block_table
            slots.extend(table[p // bs] * bs + p % bs for p in range(start, end))
            (decode if c.is_decode else prefill).append(c)
            if c.samples:
                sample_rows.append(len(ids) - 1)
        dev = self.device

        def tensor(values, dtype=torch.int32):
            return torch.tensor(values, dtype=dtype, device=dev)

        qsl = [0]
        for c in prefill:
            qsl.append(qsl[-1] + c.num_tokens)
        meta = AttentionMetadata(
            slot_mapping=tensor(slots, torch.long),
            num_decode_tokens=len(decode),
            decode_block_tables=self._block_tables(decode),
            decode_context_lens=tensor([c.start + 1 for c in decode]),
            prefill_block_tables=self._block_tables(prefill),
            prefill_query_start_loc=tensor(qsl),
            prefill_context_lens=tensor([c.start + c.num_tokens for c in prefill]),
        )
        return tensor(ids, torch.long), tensor(pos, torch.long), meta, tensor(sample_rows, torch.long)

    def _block_tables(self, chunks: list[ScheduledChunk]) -> torch.Tensor:
        width = max((len(c.block_table) for c in chunks), default=0)
        rows = [c.block_table + [0] * (width - len(c.block_table)) for c in chunks]
        return torch.tensor(rows, dtype=torch.int32, device=self.device).reshape(len(chunks), width)
