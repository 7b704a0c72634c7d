"""How a model (any family: `engine.models.args.ModelArgs`) splits over `world`
tensor-parallel ranks (Megatron-style).

Rank r holds query heads [r * Hq/N, (r+1) * Hq/N), the intermediate slice
[r * I/N, (r+1) * I/N) and the vocab rows [r * ceil(V/N), ...) (the last rank's slice may be
short or empty). KV heads: with Hkv >= N each rank holds Hkv/N of them, the ones its query
heads read; with Hkv < N (N a multiple of Hkv) each rank holds a copy of the one KV head its
query heads read, so the KV heads are replicated N/Hkv times. Falcon's fused
query_key_value keeps, for each KV group a rank holds, that rank's query heads of the group
and the group's key and value (`fused_qkv_rows`).
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.models.args import ModelArgs


def _config_name(args: ModelArgs, field: str) -> str:
    """config.json's name of `field` (the family's: Falcon's num_kv_heads, ...)."""
    return args.CONFIG_NAMES.get(field, field)


def check_tensor_parallel_size(world: object) -> None:
    """ValueError unless `world` is an int >= 1 (whatever the model)."""
    if isinstance(world, bool) or not isinstance(world, int) or world < 1:
        raise ValueError(f"tensor_parallel_size must be an int >= 1, got {world!r}")


def check_split(args: ModelArgs, world: int) -> None:
    """ValueError naming the `config.json` field when `args` cannot split over `world`
    ranks."""
    check_tensor_parallel_size(world)
    if args.num_heads % world:
        raise ValueError(f"tensor_parallel_size {world} does not divide the model's "
                         f"{_config_name(args, 'num_heads')} {args.num_heads}")
    kv = args.num_kv_heads
    if kv % world and world % kv:
        raise ValueError(f"tensor_parallel_size {world} must divide or be a multiple of the "
                         f"model's {_config_name(args, 'num_kv_heads')} {kv}")
    if args.intermediate_size % world:
        raise ValueError(f"tensor_parallel_size {world} does not divide the model's "
                         f"{_config_name(args, 'intermediate_size')} {args.intermediate_size}")


@dataclass(frozen=True)
class ShardLayout:
    """Rank `rank`'s slices of a model split `world` ways (validated by `check_split`)."""

    args: ModelArgs
    rank: int
    world: int

    def __post_init__(self) -> None:
        check_split(self.args, self.world)
        if not 0 <= self.rank < self.world:
            raise ValueError(f"rank must be in [0, {self.world}), got {self.rank}")

    @property
    def num_heads(self) -> int:
        return self.args.num_heads // self.world

    @property
    def num_kv_heads(self) -> int:
        return max(1, self.args.num_kv_heads // self.world)

    @property
    def first_kv_head(self) -> int:
        """The first KV head this rank holds (its query heads read it and the next ones)."""
        group = self.args.num_heads // self.args.num_kv_heads
        return self.rank * self.num_heads // group

    def heads(self) -> slice:
        """This rank's query-head columns of q_proj's output (and o_proj's input)."""
        width = self.num_heads * self.args.head_dim
        return slice(self.rank * width, (self.rank + 1) * width)

    def kv_heads(self) -> slice:
        """This rank's KV-head columns of k_proj's and v_proj's outputs."""
        d = self.args.head_dim
        return slice(self.first_kv_head * d, (self.first_kv_head + self.num_kv_heads) * d)

    def fused_qkv_rows(self) -> list[slice]:
        """This rank's rows of Falcon's fused query_key_value output (laid out per KV group:
        its query heads, its key head, its value head), kept in that layout: for each KV
        group the rank holds, the rank's query heads of the group, then the group's key and
        value."""
        d, group = self.args.head_dim, self.args.num_heads // self.args.num_kv_heads
        first_q = self.rank * self.num_heads
        rows = []
        for g in range(self.first_kv_head, self.first_kv_head + self.num_kv_heads):
            base = g * (group + 2) * d                      # group g's first row
            lo = max(first_q - g * group, 0)                # the rank's heads in the group
            hi = min(first_q + self.num_heads - g * group, group)
            rows += [slice(base + lo * d, base + hi * d),
                     slice(base + group * d, base + (group + 2) * d)]
        return rows

    def intermediate(self) -> slice:
        width = self.args.intermediate_size // self.world
        return slice(self.rank * width, (self.rank + 1) * width)

    @property
    def vocab_per_rank(self) -> int:
        return -(-self.args.vocab_size // self.world)

    def vocab(self) -> slice:
        """This rank's rows of the embedding and LM head (clipped to the vocab)."""
        start = min(self.rank * self.vocab_per_rank, self.args.vocab_size)
        return slice(start, min(start + self.vocab_per_rank, self.args.vocab_size))
