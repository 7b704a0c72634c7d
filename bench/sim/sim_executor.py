"""The simulator's executor: runs a plan in virtual time, with a cost model for its duration.

It honours the engine's executor contract (`engine/executor.py`): a token for every chunk that
samples, None otherwise, and the time its swap copies took. Instead of computing anything it
advances the shared `VirtualClock` by the step's modelled duration, so the engine (which
measures a step as `clock() - plan.created_at`) charges exactly that as service.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from engine.executor import StepResult
from scheduler.plan import ScheduledChunk, SchedulePlan

from bench.sim.cost_model import CostModel

SIM_TOKEN_ID = 100  # the made-up token without a `next_token` (calls run with ignore_eos)


class VirtualClock:
    """Simulated time in seconds. Callable (the engine's clock); only moves forward."""

    def __init__(self, start: float = 0.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"seconds must be >= 0, got {seconds}")
        self.now += seconds

    def jump_to(self, t: float) -> None:
        """Move to `t` if it is later (never back)."""
        if t > self.now:
            self.now = t


def is_speed(value: object) -> bool:
    """Whether `value` is a valid relative speed: a number (not a bool) > 0."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


class SimulatedExecutor:
    """Executes plans by advancing `clock` by `cost_model`'s step time plus the swap time.

    Sampled tokens: `next_token(call's tokens so far)` (the driver's PromptMaker continues each
    program's token stream, so a later call whose prompt holds this call's output hits it in
    the prefix cache, as a chat history does), or SIM_TOKEN_ID without one.

    Swaps: each non-empty direction (out, then in) is one bulk transfer costing
    `cost_model.swap_seconds(len(pairs), bytes_per_block)`; they add to the step time and are
    reported as `swap_seconds`. Counters read by the driver: `num_steps`,
    `num_tokens_computed` (prefill and decode tokens run, so prefill recomputed after an
    eviction shows), `num_swap_transfers`, `busy_seconds`, `swap_seconds_total`.

    `speed` divides every step's compute time (0.5: a GPU at half speed, for imbalance
    studies; swaps are not scaled).
    """

    def __init__(self, cost_model: CostModel, clock: VirtualClock, block_size: int = 16,
                 next_token: Callable[[Sequence[int]], int] | None = None,
                 speed: float = 1.0) -> None:
        if not is_speed(speed):
            raise ValueError(f"speed must be a number > 0, got {speed!r}")
        self.cost_model = cost_model
        self.speed = float(speed)
        self.clock = clock
        self.next_token = next_token
        self.bytes_per_block = cost_model.bytes_per_block(block_size)
        self.num_steps = 0
        self.num_tokens_computed = 0
        self.num_swap_transfers = 0
        self.busy_seconds = 0.0
        self.swap_seconds_total = 0.0

    def execute(self, plan: SchedulePlan) -> StepResult:
        swap = 0.0
        for pairs in (plan.swap_out, plan.swap_in):
            if pairs:
                swap += self.cost_model.swap_seconds(len(pairs), self.bytes_per_block)
                self.num_swap_transfers += 1
        if plan.is_continuation:  # decodes only: one new token over each call's context
            new, tokens = len(plan.chunks), self._next_tokens(plan.chunks)
            kv_tokens = pairs_total = sum(chunk.start for chunk in plan.chunks) + new
        else:
            new, pairs_total, kv_tokens, tokens = self._totals(plan.chunks)
        seconds = swap + self.cost_model.step_seconds_from_totals(
            new, pairs_total, kv_tokens, new_round=not plan.is_continuation) / self.speed
        if not plan.is_empty:
            self.num_steps += 1
        self.num_tokens_computed += new
        self.busy_seconds += seconds
        self.swap_seconds_total += swap
        self.clock.advance(seconds)
        return StepResult(tokens, swap)

    def _next_tokens(self, chunks: list[ScheduledChunk]) -> list[int | None]:
        """The token each of `chunks` (all of which sample) samples."""
        if self.next_token is None:
            return [SIM_TOKEN_ID] * len(chunks)
        next_token = self.next_token
        return [next_token(chunk.call.all_token_ids) for chunk in chunks]

    def _totals(self, chunks: list[ScheduledChunk]) -> tuple[int, int, int, list[int | None]]:
        """(tokens run, query-key pairs, KV tokens read, sampled tokens) of a step's chunks."""
        new = pairs_total = kv_tokens = 0
        tokens: list[int | None] = []
        for chunk in chunks:
            n = chunk.num_tokens
            context = chunk.start + n
            new += n
            pairs_total += n * context - n * (n - 1) // 2
            kv_tokens += context
            if not chunk.samples:
                tokens.append(None)
            elif self.next_token is None:
                tokens.append(SIM_TOKEN_ID)
            else:
                tokens.append(self.next_token(chunk.call.all_token_ids))
        return new, pairs_total, kv_tokens, tokens
