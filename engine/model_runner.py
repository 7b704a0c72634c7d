"""Runs a SchedulePlan on a real Llama model over the paged KV cache (CPU or CUDA)."""

from __future__ import annotations

import itertools
import time

import torch

from engine.config import EngineConfig
from engine.executor import StepResult
from engine.kv_spec import kv_cache_spec
from engine.loader import ModelFiles, load_model
from engine.logprobs import TokenLogprob, prompt_token_logprobs, token_logprobs
from engine.models.cpu_linear import pack_linears
from engine.models.greedy_screen import GreedyScreen, make_greedy_screen
from engine.parallel.comm import Communicator
from engine.parallel.layers import shard_model
from engine.parallel.layout import ShardLayout
from engine.sampler import Sampler
from engine.sampling_params import SamplingParams
from engine.staging import HostStaging
from engine.step_inputs import StepInputs
from engine.structured.masks import MaskFiller
from kvcache.kv_tensor import allocate_kv_cache, layer_kv
from kvcache.swap import BulkSwapper
from scheduler.plan import SchedulePlan


class ModelRunner:
    """Owns the model weights, the block-major KV cache (of `kv_spec`, the engine's one
    spec: `engine.kv_spec`) and the host swap pool.

    With a `comm` (tensor parallelism, `engine.parallel`) it holds rank `comm.rank`'s shard
    of the model and of the KV heads, on `rank_device(config.device, comm.rank)`; every rank
    runs `forward` on the same `StepInputs`, and rank 0 samples (`run`).

    With `config.greedy_screen`, on one process on a CPU with native bf16, steps whose rows
    all sample greedily with no logprobs and no grammar take their tokens from a bf16 screen
    of the LM head (`engine.models.greedy_screen`) instead of the full fp32 logits."""

    def __init__(self, config: EngineConfig, files: ModelFiles, max_model_len: int,
                 comm: Communicator | None = None) -> None:
        self.device = rank_device(config.device, comm.rank if comm else 0)
        self.dtype = getattr(torch, config.dtype)
        self.vocab_size = files.args.vocab_size
        self.block_size = config.block_size
        self.model = load_model(files, max_model_len, self.dtype, self.device)
        if comm is not None:
            shard_model(self.model, ShardLayout(files.args, comm.rank, comm.world), comm)
        self.greedy_screen: GreedyScreen | None = (
            make_greedy_screen(self.model) if config.greedy_screen and comm is None else None)
        pack_linears(self.model)  # float32 and bfloat16 CPU weights; a no-op on CUDA
        self.kv_spec = kv_cache_spec(files.args, config)
        self.kv_cache = allocate_kv_cache(self.kv_spec, self.device)
        self.kv_layers = [layer_kv(self.kv_cache, i) for i in range(self.kv_spec.num_layers)]
        self.swapper = BulkSwapper(self.kv_cache, config.num_host_blocks)
        self.sampler = Sampler(config.seed)
        self.masks = MaskFiller(files.args.vocab_size)
        self.staging = HostStaging(self.device) if self.device.type == "cuda" else None

    def close(self) -> None:
        """Stop the mask worker thread (idempotent)."""
        self.masks.close()

    @property
    def num_kv_blocks(self) -> int:
        return self.kv_spec.num_blocks

    def execute(self, plan: SchedulePlan) -> StepResult:
        return self.run(StepInputs.of(plan, self.block_size), plan)

    @torch.inference_mode()
    def run(self, step: StepInputs, plan: SchedulePlan) -> StepResult:
        """`forward` the step (flattened from `plan`), then sample its sampling chunks; the
        constrained ones' masks are filled meanwhile and applied to their rows only (the
        logprobs are the model's, before the mask)."""
        sampling = [c for c in plan.chunks if c.samples]
        masks = self.masks.start([c.call.grammar for c in sampling])
        rows, scored, swap_seconds = self._sample_hidden(step)
        if rows is None:
            return StepResult([], swap_seconds)
        params = [c.call.params for c in sampling]
        tokens = None if masks is not None else self._screened_tokens(rows, params)
        logprobs = None
        if tokens is None:
            logits = self.model.logits(rows)
            tokens = self.sampler(self.masks.apply(logits, masks), params,
                                  [c.call.num_output_tokens for c in sampling])
            wanted = [p.logprobs for p in params]
            if any(k is not None for k in wanted):
                logprobs = iter(token_logprobs(logits, tokens, wanted))
        sampled = iter(tokens)
        return StepResult([next(sampled) if c.samples else None for c in plan.chunks],
                          swap_seconds,
                          None if logprobs is None else
                          [next(logprobs) if c.samples else None for c in plan.chunks],
                          _per_chunk(scored, step.prompt_counts) if scored else None)

    def _screened_tokens(self, rows: torch.Tensor, params: list[SamplingParams]
                         ) -> list[int] | None:
        """The greedy tokens of `rows` from the screen, when there is one and every row
        samples greedily without logprobs (else, or out of the screen's range, None)."""
        if self.greedy_screen is None or not all(p.greedy and p.logprobs is None
                                                 for p in params):
            return None
        return self.greedy_screen.tokens(rows)

    @torch.inference_mode()
    def forward(self, step: StepInputs
                ) -> tuple[torch.Tensor | None, list[TokenLogprob], float]:
        """`_sample_hidden`, with the logits of the sample rows (what every tensor-parallel
        rank runs: the head gathers the vocabulary over the ranks)."""
        rows, scored, swap_seconds = self._sample_hidden(step)
        return (None if rows is None else self.model.logits(rows)), scored, swap_seconds

    def _sample_hidden(self, step: StepInputs
                       ) -> tuple[torch.Tensor | None, list[TokenLogprob], float]:
        """Make the step's swap copies (out, then in), then run its tokens: the hidden states
        of its sample rows (None without tokens), the logprobs its prompt rows score (in row
        order; made a slice at a time, `prompt_token_logprobs`) and the seconds the copies
        took."""
        started = time.perf_counter()
        self.swapper.swap_out(step.swap_out)
        self.swapper.swap_in(step.swap_in)
        swap_seconds = time.perf_counter() - started if step.swap_out or step.swap_in else 0.0
        if not step.has_tokens:
            return None, [], swap_seconds
        input_ids, positions, meta, sample_rows = step.tensors(self.device, self.staging)
        hidden = self.model(input_ids, positions, self.kv_layers, meta)
        scored = [] if not step.prompt_rows else prompt_token_logprobs(
            self.model.logits, hidden[torch.tensor(step.prompt_rows, device=hidden.device)],
            step.prompt_targets, step.prompt_top, self.vocab_size)
        return hidden[sample_rows], scored, swap_seconds


def _per_chunk(scored: list[TokenLogprob], counts: list[int]) -> list[list[TokenLogprob]]:
    """`scored` cut into consecutive runs of `counts[i]` items."""
    items = iter(scored)
    return [list(itertools.islice(items, n)) for n in counts]


def rank_device(device: str, rank: int) -> torch.device:
    """The device of tensor-parallel rank `rank`: the CPU for every rank, or the `rank`-th
    CUDA device from `device`'s index ("cuda" counts from 0)."""
    base = torch.device(device)
    if base.type != "cuda":
        return base
    return torch.device("cuda", (base.index or 0) + rank)
