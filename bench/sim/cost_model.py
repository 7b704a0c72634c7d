"""The simulator's cost model: how long one engine step and one swap take on a GPU preset.

A step is either compute-bound or memory-bound, whichever is slower (a roofline):

    step = step_overhead [+ schedule_overhead on a new scheduling round]
           + max(flops / (peak_flops * efficiency * tp), bytes / (hbm_bandwidth * tp))

    flops = 2 * params * new_tokens                    (every weight is a multiply-add per token)
          + 4 * layers * q_heads * head_dim * pairs    (QK^T and PV; `pairs` = query-key pairs)
    bytes = params * dtype_bytes                       (the weights, read once per step)
          + kv_per_token * (context read + new tokens written)

`kv_per_token = 2 * layers * kv_heads * head_dim * dtype_bytes` (K and V). Tensor parallelism
splits both the FLOPs and the bytes over `tp` GPUs and adds its collectives, not overlapped:

    collectives = layers * allreduces_per_layer + 2   (the embedding's and the logits')
    comm = collectives * (allreduce_latency
                          + 2 * (tp - 1) / tp * new_tokens * hidden * dtype_bytes / bus_bandwidth)

(a ring all-reduce of the step's activations; `allreduces_per_layer` is 2 for Llama, 1 for
Falcon's parallel attention and MLP). The GPU presets' latency and bus bandwidth are NVLink
budgets (see GPU_PRESETS), not figures measured here; `bench.studies.tp_bench` measures gloo's on
this CPU and checks the term against measured TP=2 steps.
A chunk is `(num_new_tokens, context_len)` with `context_len` the call's tokens after the chunk
(start + new); its new tokens attend causally, so it makes
`new * context_len - new * (new - 1) / 2` query-key pairs and reads `context_len - new` cached
tokens.

Worked floors (see tests/bench/test_cost_model.py):
- llama-3.1-8b on a100-80g: weights 8.03e9 * 2 B = 16.06 GB; one decode at context 1 costs at
  least 16.06 GB / 2.0 TB/s = 8.03 ms (plus the overheads, 2 ms by default).
- a 2,048-token prefill of the same model: 2 * 8.03e9 * 2048 = 32.9 TFLOP; at 312 TFLOP/s * 0.6 that
  is 176 ms, far above its 16 GB / 2 TB/s = 8 ms of weight reads: compute-bound.
- KV per token: 8B 128 KiB, 70B 320 KiB (DESIGN.md's table).

Swaps: one bulk gather-copy-scatter per direction, `blocks * bytes_per_block / host_link +
per_transfer_latency`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

GB = 1e9
TB = 1e12
TFLOPS = 1e12


@dataclass(frozen=True)
class GPUPreset:
    """One GPU: dense bf16 peak, matmul efficiency reached, HBM bandwidth and size, the
    practical host link (PCIe) bandwidth and the fixed latency of one bulk transfer, and the
    host memory available for swapped KV blocks (per engine); for tensor parallelism, the
    latency of one all-reduce and the all-reduce bus bandwidth between its GPUs."""

    name: str
    peak_flops: float
    efficiency: float
    hbm_bandwidth: float
    memory_bytes: float
    host_link_bandwidth: float
    per_transfer_latency: float
    host_memory_bytes: float
    allreduce_latency: float = 0.0
    allreduce_bus_bandwidth: float = float("inf")

    def __post_init__(self) -> None:
        for field_name in ("peak_flops", "hbm_bandwidth", "memory_bytes", "host_link_bandwidth"):
            if not getattr(self, field_name) > 0:
                raise ValueError(f"{field_name} must be positive, got {getattr(self, field_name)}")
        if not 0 < self.efficiency <= 1:
            raise ValueError(f"efficiency must be in (0, 1], got {self.efficiency}")
        if self.per_transfer_latency < 0:
            raise ValueError(f"per_transfer_latency must be >= 0, got {self.per_transfer_latency}")
        if self.host_memory_bytes < 0:
            raise ValueError(f"host_memory_bytes must be >= 0, got {self.host_memory_bytes}")
        if self.allreduce_latency < 0 or not self.allreduce_bus_bandwidth > 0:
            raise ValueError(f"allreduce_latency must be >= 0 and allreduce_bus_bandwidth "
                             f"positive, got {self.allreduce_latency}, "
                             f"{self.allreduce_bus_bandwidth}")


@dataclass(frozen=True)
class ModelPreset:
    """One model's shapes, parameter count, how many GPUs it is split over and how many
    all-reduces a layer makes under tensor parallelism."""

    name: str
    layers: int
    hidden: int
    q_heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    vocab: int
    params: float
    tensor_parallel: int = 1
    dtype_bytes: int = 2
    allreduces_per_layer: int = 2

    def __post_init__(self) -> None:
        for field_name in ("layers", "hidden", "q_heads", "kv_heads", "head_dim", "ffn", "vocab",
                           "params", "tensor_parallel", "dtype_bytes", "allreduces_per_layer"):
            if not getattr(self, field_name) > 0:
                raise ValueError(f"{field_name} must be positive, got {getattr(self, field_name)}")

    @property
    def weight_bytes(self) -> float:
        return self.params * self.dtype_bytes

    @property
    def kv_bytes_per_token(self) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * self.dtype_bytes

    @classmethod
    def from_hf_config(cls, name: str, cfg: dict, dtype_bytes: int = 4) -> "ModelPreset":
        """The preset of a Llama-family Hugging Face `config.json` dict (one device). `params`
        is counted from the shapes: embedding (and an untied LM head), per layer the Q, K, V,
        O and gate/up/down projections and two norms, and the final norm."""
        hidden, layers = cfg["hidden_size"], cfg["num_hidden_layers"]
        q_heads = cfg["num_attention_heads"]
        kv_heads = cfg.get("num_key_value_heads") or q_heads
        head_dim = cfg.get("head_dim") or hidden // q_heads
        ffn, vocab = cfg["intermediate_size"], cfg["vocab_size"]
        embeddings = vocab * hidden * (1 if cfg.get("tie_word_embeddings", False) else 2)
        per_layer = (2 * hidden * q_heads * head_dim + 2 * hidden * kv_heads * head_dim
                     + 3 * hidden * ffn + 2 * hidden)
        return cls(name, layers, hidden, q_heads, kv_heads, head_dim, ffn, vocab,
                   float(embeddings + layers * per_layer + hidden), 1, dtype_bytes)

    def hf_config(self) -> dict:
        """A Hugging Face `config.json` for this shape (enough for an engine with an
        injected executor; no weights)."""
        return {
            "architectures": ["LlamaForCausalLM"], "model_type": "llama",
            "vocab_size": self.vocab, "hidden_size": self.hidden,
            "intermediate_size": self.ffn, "num_hidden_layers": self.layers,
            "num_attention_heads": self.q_heads, "num_key_value_heads": self.kv_heads,
            "head_dim": self.head_dim, "max_position_embeddings": 131072,
            "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "tie_word_embeddings": False,
            "bos_token_id": 128000, "eos_token_id": 128001, "torch_dtype": "bfloat16",
        }


# Datasheet figures (DESIGN.md "Reference figures"); host memory: the paper's host had 1.36 TB,
# we give each engine 256 GB of it (a large swap space that is cheap to index in the simulator).
# All-reduce over NVLink (SXM boards, NVSwitch): a budget of 15 us per small all-reduce and
# the bus bandwidth nccl-tests is commonly reported to reach for large messages (about 230 GB/s
# on A100, 450 GB/s on H100/H200); never measured here (no multi-GPU machine).
GPU_PRESETS: dict[str, GPUPreset] = {
    p.name: p for p in (
        GPUPreset("a100-80g", 312 * TFLOPS, 0.6, 2.0 * TB, 80 * GB, 25 * GB, 1e-4, 256 * GB,
                  15e-6, 230 * GB),
        GPUPreset("h100", 989 * TFLOPS, 0.6, 3.35 * TB, 80 * GB, 50 * GB, 1e-4, 256 * GB,
                  15e-6, 450 * GB),
        GPUPreset("h200", 989 * TFLOPS, 0.6, 4.8 * TB, 141 * GB, 50 * GB, 1e-4, 256 * GB,
                  15e-6, 450 * GB),
    )
}

# The paper's three setups: Llama-3.1-8B on one GPU, 70B on 4 and Falcon-180B on 8 (its new
# decoder architecture: 232 query heads of 64 in 8 KV groups, attention and MLP in parallel, so
# one all-reduce a layer; a GELU MLP of 4 x hidden; vocabulary 65,024).
MODEL_PRESETS: dict[str, ModelPreset] = {
    p.name: p for p in (
        ModelPreset("llama-3.1-8b", 32, 4096, 32, 8, 128, 14336, 128256, 8.03e9, 1, 2),
        ModelPreset("llama-3.1-70b", 80, 8192, 64, 8, 128, 28672, 128256, 70.6e9, 4, 2),
        ModelPreset("falcon-180b", 80, 14848, 232, 8, 64, 59392, 65024, 179.5e9, 8, 2, 1),
        # The families agents run (their Hugging Face config.json shapes); the large ones
        # split over the fewest A100-80GB that leave room for KV.
        ModelPreset("qwen2.5-7b", 28, 3584, 28, 4, 128, 18944, 152064, 7.62e9, 1, 2),
        ModelPreset("qwen2.5-72b", 80, 8192, 64, 8, 128, 29568, 152064, 72.7e9, 4, 2),
        ModelPreset("qwen3-8b", 36, 4096, 32, 8, 128, 12288, 151936, 8.19e9, 1, 2),
        ModelPreset("qwen3-32b", 64, 5120, 64, 8, 128, 25600, 151936, 32.8e9, 2, 2),
    )
}


def gpu_preset(name: str) -> GPUPreset:
    if name not in GPU_PRESETS:
        raise ValueError(f"preset must be one of {sorted(GPU_PRESETS)}, got {name!r}")
    return GPU_PRESETS[name]


def model_preset(name: str) -> ModelPreset:
    if name not in MODEL_PRESETS:
        raise ValueError(f"model must be one of {sorted(MODEL_PRESETS)}, got {name!r}")
    return MODEL_PRESETS[name]


class CostModel:
    """Step and swap durations for one model on one GPU preset (tp GPUs of it).

    `step_overhead` is paid by every step (launches, sampling, CPU work); `schedule_overhead`
    only by steps that start a new scheduling round (what multistep saves). `kv_utilization` is
    the share of memory left after the weights that holds KV blocks.
    """

    def __init__(self, gpu: GPUPreset, model: ModelPreset, step_overhead: float = 1e-3,
                 schedule_overhead: float = 1e-3, kv_utilization: float = 0.9) -> None:
        if step_overhead < 0:
            raise ValueError(f"step_overhead must be >= 0, got {step_overhead}")
        if schedule_overhead < 0:
            raise ValueError(f"schedule_overhead must be >= 0, got {schedule_overhead}")
        if not 0 < kv_utilization <= 1:
            raise ValueError(f"kv_utilization must be in (0, 1], got {kv_utilization}")
        self.gpu, self.model = gpu, model
        self.step_overhead = step_overhead
        self.schedule_overhead = schedule_overhead
        self.kv_utilization = kv_utilization
        tp = model.tensor_parallel
        self._flops_rate = gpu.peak_flops * gpu.efficiency * tp
        self._byte_rate = gpu.hbm_bandwidth * tp
        self._attn_flops_per_pair = 4 * model.layers * model.q_heads * model.head_dim
        self._kv_per_token = model.kv_bytes_per_token
        collectives = model.layers * model.allreduces_per_layer + 2 if tp > 1 else 0
        self._comm_latency = collectives * gpu.allreduce_latency
        self._comm_seconds_per_token = (collectives * 2 * (tp - 1) / tp * model.hidden
                                        * model.dtype_bytes / gpu.allreduce_bus_bandwidth)

    @classmethod
    def from_names(cls, preset: str, model: str, **kwargs) -> "CostModel":
        return cls(gpu_preset(preset), model_preset(model), **kwargs)

    # ----- steps -------------------------------------------------------------------------
    def step_seconds(self, chunks: Iterable[tuple[int, int]], new_round: bool = True) -> float:
        """Duration of one step running `chunks` of `(num_new_tokens, context_len)`; an empty
        step costs nothing."""
        return self.step_seconds_from_totals(*batch_totals(chunks), new_round)

    def step_seconds_from_totals(self, new_tokens: int, pairs: int, kv_tokens: int,
                                 new_round: bool = True) -> float:
        """`step_seconds` from a batch's totals (the executor's fast path)."""
        if new_tokens == 0:
            return 0.0
        flops, nbytes = self.step_work(new_tokens, pairs, kv_tokens)
        overhead = self.step_overhead + (self.schedule_overhead if new_round else 0.0)
        return overhead + max(flops / self._flops_rate, nbytes / self._byte_rate) \
            + self.comm_seconds(new_tokens)

    def comm_seconds(self, new_tokens: int) -> float:
        """The tensor-parallel collectives of a step of `new_tokens` (0 at tp 1)."""
        return self._comm_latency + self._comm_seconds_per_token * new_tokens

    def step_work(self, new_tokens: int, pairs: int, kv_tokens: int) -> tuple[float, float]:
        """(FLOPs, bytes) of a step from its totals: what the roofline rates (calibration fits
        the rates to measured steps with these)."""
        return (2 * self.model.params * new_tokens + self._attn_flops_per_pair * pairs,
                self.model.weight_bytes + self._kv_per_token * kv_tokens)

    def call_seconds(self, prompt_len: int, output_len: int) -> float:
        """A simple estimate of one call's service alone on the GPU: its prefill as one step,
        then `output_len - 1` decodes at its mean context (the oracle's `oracle_work`)."""
        prefill = self.step_seconds([(prompt_len, prompt_len)])
        mean_context = prompt_len + (output_len + 1) // 2
        return prefill + (output_len - 1) * self.step_seconds([(1, mean_context)])

    # ----- memory ------------------------------------------------------------------------
    def bytes_per_block(self, block_size: int) -> int:
        """KV bytes of one block across all layers, summed over the tp GPUs."""
        return block_size * self._kv_per_token

    def kv_blocks(self, block_size: int) -> int:
        """Device KV blocks that fit beside the weights: (memory * tp - weights) * utilization."""
        if block_size <= 0:
            raise ValueError(f"block_size must be positive, got {block_size}")
        free = self.gpu.memory_bytes * self.model.tensor_parallel - self.model.weight_bytes
        blocks = int(free * self.kv_utilization // self.bytes_per_block(block_size))
        if blocks < 1:
            raise ValueError(f"model: {self.model.name} does not fit on "
                             f"{self.model.tensor_parallel} x {self.gpu.name}")
        return blocks

    def host_blocks(self, block_size: int) -> int:
        """Host (swap) blocks that fit in the preset's host memory."""
        return int(self.gpu.host_memory_bytes // self.bytes_per_block(block_size))

    def swap_seconds(self, num_blocks: int, bytes_per_block: int) -> float:
        """One bulk transfer of `num_blocks` blocks over the host link (0 for none). With tp
        GPUs each moves its shard over its own link, in parallel."""
        if num_blocks <= 0:
            return 0.0
        link = self.gpu.host_link_bandwidth * self.model.tensor_parallel
        return num_blocks * bytes_per_block / link + self.gpu.per_transfer_latency

    @property
    def prefill_tokens_per_second(self) -> float:
        """Tokens per second of a large (2,048-token) prefill: the recompute rate."""
        n = 2048
        return n / self.step_seconds([(n, n)])


def batch_totals(chunks: Iterable[tuple[int, int]]) -> tuple[int, int, int]:
    """(new tokens, query-key pairs, KV tokens touched) of `(num_new_tokens, context_len)`
    chunks; raises ValueError for an impossible chunk."""
    new = pairs = kv_tokens = 0
    for n, context in chunks:
        if n <= 0 or context < n:
            raise ValueError(f"chunk: need 0 < num_new_tokens <= context_len, got ({n}, {context})")
        new += n
        pairs += n * context - n * (n - 1) // 2
        kv_tokens += context  # (context - n) read + n written
    return new, pairs, kv_tokens


def chunk_shapes(chunks: Sequence) -> list[tuple[int, int]]:
    """`(num_new_tokens, context_len)` of a plan's `ScheduledChunk`s."""
    return [(c.num_tokens, c.start + c.num_tokens) for c in chunks]
