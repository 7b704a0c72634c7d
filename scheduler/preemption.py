"""What a preemption does with its victim's KV, and the two rates that price the options.

Per preemption, `choose_preemption` prices each option in seconds of device time:

- `recompute`: drop the KV; the victim later recomputes its computed tokens:
  `tokens / prefill_tokens_per_second`;
- `swap`: move every block to host now and back later in two bulk copies:
  `2 x (blocks x bytes_per_block / host_link_bandwidth + swap_latency)` (only if the host
  pool has room);
- `keep`: free the blocks into the prefix cache at the program's rank; the tokens of the
  partial last block are lost (recomputed), and when the preemption is for memory the freed
  blocks will be evicted at once, costing the cheaper of the other two (an offload and a
  fetch back, or a recompute); otherwise they are revived for free by a prefix hit. Needs
  prefix caching.

`auto` takes the cheapest; the fixed modes take theirs (`keep` falls back to recompute without
prefix caching, `swap` to recompute when the host pool is full).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from scheduler.config import SchedulerConfig

MIN_PREFILL_SAMPLE = 128  # prefill tokens a step needs before it says anything of the rate
RATE_WEIGHT = 0.25  # weight of a new measurement in the running average


class PreemptionKind(enum.Enum):
    KEEP = "keep"
    SWAP = "swap"
    RECOMPUTE = "recompute"


@dataclass(frozen=True)
class PreemptionCosts:
    """Estimated seconds of each option (inf: not possible)."""

    keep: float
    swap: float
    recompute: float

    def cheapest(self) -> PreemptionKind:
        options = ((self.keep, PreemptionKind.KEEP), (self.swap, PreemptionKind.SWAP),
                   (self.recompute, PreemptionKind.RECOMPUTE))
        return min(options, key=lambda option: option[0])[1]


class TransferRates:
    """Host-link bandwidth (bytes/s) and prefill speed (tokens/s): the config's values until
    the engine has measured them, then a running average of what it measured."""

    def __init__(self, config: SchedulerConfig) -> None:
        self.measure = config.measure_rates and config.service_mode == "time"
        self.bytes_per_block = config.bytes_per_block
        self.swap_latency = config.swap_latency
        self.host_link_bandwidth = config.host_link_bandwidth
        self.prefill_tokens_per_second = config.prefill_tokens_per_second
        self.num_link_samples = 0
        self.num_prefill_samples = 0

    def observe_step(self, prefill_tokens: int, batched_tokens: int, seconds: float) -> None:
        """A step ran `batched_tokens` tokens (`prefill_tokens` of them prefill) in `seconds`
        of compute; a step that is mostly prefill measures the prefill speed."""
        if not self.measure or seconds <= 0 or prefill_tokens < MIN_PREFILL_SAMPLE \
                or 2 * prefill_tokens < batched_tokens:
            return
        self.prefill_tokens_per_second = self._average(
            self.prefill_tokens_per_second, batched_tokens / seconds, self.num_prefill_samples)
        self.num_prefill_samples += 1

    def observe_swap(self, num_blocks: int, num_transfers: int, seconds: float) -> None:
        """`num_transfers` bulk copies moved `num_blocks` blocks in `seconds`."""
        moving = seconds - num_transfers * self.swap_latency
        if not self.measure or num_blocks == 0 or moving <= 0 or self.bytes_per_block <= 0:
            return
        self.host_link_bandwidth = self._average(
            self.host_link_bandwidth, num_blocks * self.bytes_per_block / moving,
            self.num_link_samples)
        self.num_link_samples += 1

    def swap_seconds(self, num_blocks: int) -> float:
        """Moving `num_blocks` blocks out and back in (two bulk transfers)."""
        one_way = num_blocks * self.bytes_per_block / self.host_link_bandwidth
        return 2 * (one_way + self.swap_latency)

    def recompute_seconds(self, num_tokens: int) -> float:
        return num_tokens / self.prefill_tokens_per_second

    @staticmethod
    def _average(current: float, sample: float, num_samples: int) -> float:
        return sample if num_samples == 0 else current + RATE_WEIGHT * (sample - current)


def preemption_costs(rates: TransferRates, num_blocks: int, num_computed_tokens: int,
                     block_size: int, can_keep: bool, can_swap: bool,
                     for_memory: bool) -> PreemptionCosts:
    """The three options' prices for a victim holding `num_blocks` blocks for
    `num_computed_tokens` tokens."""
    recompute = rates.recompute_seconds(num_computed_tokens)
    swap = rates.swap_seconds(num_blocks) if can_swap else float("inf")
    keep = float("inf")
    if can_keep:
        keep = rates.recompute_seconds(num_computed_tokens % block_size)
        if for_memory:
            keep += min(swap, recompute)
    return PreemptionCosts(keep, swap, recompute)


def choose_preemption(mode: str, costs: PreemptionCosts) -> PreemptionKind:
    """The option `mode` takes given `costs` (see the module docstring)."""
    if mode == "auto":
        return costs.cheapest()
    kind = PreemptionKind(mode)
    if kind is PreemptionKind.RECOMPUTE:
        return kind
    chosen = costs.keep if kind is PreemptionKind.KEEP else costs.swap
    return kind if chosen != float("inf") else PreemptionKind.RECOMPUTE
