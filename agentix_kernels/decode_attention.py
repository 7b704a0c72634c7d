"""Paged decode attention: one new query token per sequence over its paged K/V (with GQA).

Contract (every implementation: the torch reference, Triton, the native CPU kernel):
    query:        [batch, num_q_heads, head_dim], the LAST token of each sequence (its K/V is
                  already in the cache)
    k_cache, v_cache: [num_blocks, block_size, num_kv_heads, head_dim], any strides
    block_tables: int32 [batch, max_blocks_per_seq]; entries past a sequence's context are
                  padding (the null block), never read
    context_lens: int32 [batch], cached tokens per sequence including the current one; 0 marks a
                  padding row, whose output is zeros
    scale:        softmax scale (usually head_dim ** -0.5)
    window:       attend only each sequence's last `window` keys (sliding-window attention;
                  0: all of them); blocks wholly before the window are never read
Query head h reads kv head h // (num_q_heads // num_kv_heads). Softmax in fp32.
Returns a new tensor shaped and typed like `query`.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F

from agentix_kernels.shapes import check_query_and_cache

# The reference builds a CSR pattern each call; torch warns once that CSR support is beta.
warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta state")


def check_shapes(query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
           block_tables: torch.Tensor, context_lens: torch.Tensor) -> int:
    """Validate shapes; return the GQA group size (query heads per kv head)."""
    group = check_query_and_cache(query, k_cache, v_cache, "batch")
    batch = query.shape[0]
    if block_tables.dim() != 2 or block_tables.shape[0] != batch:
        raise ValueError(f"block_tables must be [{batch}, max_blocks], got "
                         f"{tuple(block_tables.shape)}")
    if context_lens.shape != (batch,):
        raise ValueError(f"context_lens must be [{batch}], got {tuple(context_lens.shape)}")
    return group


@dataclass(frozen=True)
class DecodeIndex:
    """What the reference needs besides the tensors' values, the same in every layer of a step
    (it depends on the block tables, the context lengths, the heads and the caches' layout
    only): `n` blocks in all over `num_segs` (row, query head) segments; `cols`, the flat cache
    rows of every segment's slots; `crow`, the CSR row offsets; `seg_blocks`, blocks per
    segment; `repeat`, each block's segment; `last` and `past`, each non-empty segment's last
    block and its slots past the context (masked); with a window, `first` and `before`, each
    non-empty segment's first block and its slots before the window (masked)."""

    n: int
    num_segs: int
    cols: torch.Tensor
    crow: torch.Tensor
    seg_blocks: torch.Tensor
    repeat: torch.Tensor
    last: torch.Tensor
    past: torch.Tensor
    first: torch.Tensor | None = None
    before: torch.Tensor | None = None


def decode_index(k_cache: torch.Tensor, tables: torch.Tensor, lens: torch.Tensor,
                 num_q_heads: int, group: int, window: int = 0) -> DecodeIndex:
    """The `DecodeIndex` of long `tables` and `lens` over caches laid out like `k_cache`;
    `window` > 0 keeps each row's last `window` keys only."""
    block_size = k_cache.shape[1]
    if window > 0:
        return _window_index(k_cache, tables, lens, num_q_heads, group, window)
    row_blocks = (lens + block_size - 1) // block_size
    num_segs, n = lens.shape[0] * num_q_heads, int(row_blocks.sum()) * num_q_heads
    rows = _flat_rows(k_cache).shape[0]
    index_dtype = torch.int32 if max(rows, n * block_size) < 2**31 else torch.long
    cols = _slot_rows(k_cache, tables, row_blocks, num_q_heads, group).to(index_dtype)
    seg_blocks = row_blocks.repeat_interleave(num_q_heads)
    crow = torch.zeros(num_segs + 1, device=lens.device, dtype=index_dtype)
    torch.cumsum(seg_blocks * block_size, 0, dtype=index_dtype, out=crow[1:])
    nonempty = seg_blocks > 0
    last = (torch.cumsum(seg_blocks, 0) - 1)[nonempty]
    filled = (lens.repeat_interleave(num_q_heads) - (seg_blocks - 1) * block_size)[nonempty]
    past = torch.arange(block_size, device=lens.device) >= filled[:, None]
    repeat = torch.repeat_interleave(torch.arange(num_segs, device=lens.device), seg_blocks,
                                     output_size=n)
    return DecodeIndex(n, num_segs, cols, crow, seg_blocks, repeat, last, past)


def _window_index(k_cache: torch.Tensor, tables: torch.Tensor, lens: torch.Tensor,
                  num_q_heads: int, group: int, window: int) -> DecodeIndex:
    """`decode_index` over each row's blocks from the one holding its first key in the window:
    the tables shifted left past the blocks wholly before it, the lengths cut to match, and
    the first block's slots before the window masked."""
    block_size = k_cache.shape[1]
    first_key = (lens - window).clamp_(min=0)
    skip = first_key // block_size
    width = tables.shape[1]
    columns = (torch.arange(width, device=tables.device) + skip[:, None]).clamp_(max=width - 1)
    index = decode_index(k_cache, tables.gather(1, columns), lens - skip * block_size,
                         num_q_heads, group)
    nonempty = index.seg_blocks > 0
    first = (torch.cumsum(index.seg_blocks, 0) - index.seg_blocks)[nonempty]
    lead = (first_key - skip * block_size).repeat_interleave(num_q_heads)[nonempty]
    before = torch.arange(block_size, device=lens.device) < lead[:, None]
    return replace(index, first=first, before=before)


def paged_decode_attention_ref(query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                               block_tables: torch.Tensor, context_lens: torch.Tensor,
                               scale: float, step_cache: dict | None = None,
                               window: int = 0) -> torch.Tensor:
    """Torch reference of `paged_decode_attention` (the CPU path for what the native kernel
    does not take), reading K/V in place.

    Every (row, query head) is one CSR row over the slots of its row's blocks, as rows of a
    flat `[slots, head_dim]` view of the cache storage: one `sampled_addmm` gives all q.k scores
    at those slots, the softmax runs per (row, head) segment, and one weighted `embedding_bag`
    sums V. Nothing is gathered or padded. Whole blocks are read and the slots past a context
    masked (and, with a window, the first block's slots before it), so they must hold finite
    values (the engine's cache starts zeroed and only finite K/V are written). Caches other
    than float32 with head_dim-aligned strides shared by K and V are first copied, the rows'
    blocks only, into compact float32 caches.

    `step_cache`: a dict that lives for one step, shared by its layers (the same block tables
    and lengths); the `DecodeIndex` is built in the first layer and reused by the others whose
    caches have the same layout (the layers' views of one KV tensor do).
    """
    group = check_shapes(query, k_cache, v_cache, block_tables, context_lens)
    batch, num_q_heads, head_dim = query.shape
    block_size = k_cache.shape[1]
    lens = context_lens.to(device=query.device, dtype=torch.long)
    if not bool((lens > 0).any()):
        return torch.zeros_like(query)
    tables = block_tables.to(device=query.device, dtype=torch.long)
    if _readable_in_place(k_cache, v_cache):
        key = ("decode_index", k_cache.shape, k_cache.stride(), num_q_heads, window)
        index = step_cache.get(key) if step_cache is not None else None
        if index is None:
            index = decode_index(k_cache, tables, lens, num_q_heads, group, window)
            if step_cache is not None:
                step_cache[key] = index
    else:
        row_blocks = (lens + block_size - 1) // block_size
        k_cache, v_cache, tables = _compact(k_cache, v_cache, tables, row_blocks)
        index = decode_index(k_cache, tables, lens, num_q_heads, group, window)
    keys, values = _flat_rows(k_cache), _flat_rows(v_cache)
    scores = torch.zeros(index.n * block_size, device=query.device, dtype=torch.float32)
    pattern = torch.sparse_csr_tensor(index.crow, index.cols, scores,
                                      (index.num_segs, keys.shape[0]), check_invariants=False)
    torch.sparse.sampled_addmm(pattern, query.reshape(index.num_segs, head_dim).float(),
                               keys.t(), beta=0.0, alpha=scale, out=pattern)  # fills `scores`
    total = _segment_softmax_(scores.view(index.n, block_size), index)
    out = F.embedding_bag(index.cols, values, index.crow, mode="sum",
                          per_sample_weights=scores, include_last_offset=True)
    # An empty segment (context 0) sums to 0 over no slots: 0 / 1. Others have total >= 1.
    return out.div_(total.clamp_(min=1)[:, None]).view_as(query).to(query.dtype)


def _slot_rows(cache: torch.Tensor, tables: torch.Tensor, row_blocks: torch.Tensor,
               num_q_heads: int, group: int) -> torch.Tensor:
    """`_flat_rows` indices of every (row, query head)'s slots, in that order, each row's first
    `row_blocks[row]` blocks whole: long `[sum(row_blocks) * num_q_heads * block_size]`."""
    head_dim, block_size = cache.shape[3], cache.shape[1]
    block_rows, slot_rows, head_rows = (s // head_dim for s in cache.stride()[:3])
    heads = torch.arange(num_q_heads, device=tables.device) // group * head_rows
    used = torch.arange(tables.shape[1], device=tables.device) < row_blocks[:, None]
    firsts = torch.masked_select(tables[:, None, :] * block_rows + heads[:, None],
                                 used[:, None, :])
    slots = torch.arange(0, block_size * slot_rows, slot_rows, device=tables.device)
    return (firsts[:, None] + slots).view(-1)


def _segment_softmax_(scores: torch.Tensor, index: DecodeIndex) -> torch.Tensor:
    """Unnormalized softmax in place over each segment of `scores` `[blocks, block_size]`
    (the slots past each context, and before its window, masked); returns each segment's sum
    (0 for an empty one)."""
    scores[index.last] = scores[index.last].masked_fill(index.past, float("-inf"))
    if index.first is not None:
        scores[index.first] = scores[index.first].masked_fill(index.before, float("-inf"))
    peak = torch.segment_reduce(scores.amax(-1), "max", lengths=index.seg_blocks)
    scores.sub_(peak[index.repeat][:, None]).exp_()
    return torch.segment_reduce(scores.sum(-1), "sum", lengths=index.seg_blocks)


def _readable_in_place(k_cache: torch.Tensor, v_cache: torch.Tensor) -> bool:
    """Whether both caches are float32 with equal strides that step in whole head_dim rows."""
    head_dim = k_cache.shape[3]
    return (k_cache.dtype == v_cache.dtype == torch.float32 and k_cache.stride() == v_cache.stride()
            and k_cache.stride(3) == 1 and all(s % head_dim == 0 for s in k_cache.stride()[:3]))


def _flat_rows(cache: torch.Tensor) -> torch.Tensor:
    """The storage from `cache`'s first element as `[rows, head_dim]`: slot o of block b, kv head
    h is row (b * stride(0) + o * stride(1) + h * stride(2)) // head_dim."""
    head_dim = cache.shape[3]
    last = sum((size - 1) * stride for size, stride in zip(cache.shape[:3], cache.stride()[:3]))
    return cache.as_strided((last // head_dim + 1, head_dim), (head_dim, 1))


def _compact(k_cache: torch.Tensor, v_cache: torch.Tensor, tables: torch.Tensor,
             row_blocks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Contiguous float32 copies of each row's first `row_blocks[row]` blocks, with the block
    tables renumbered into them."""
    used = torch.arange(tables.shape[1], device=tables.device)[None, :] < row_blocks[:, None]
    ids = tables[used]
    renumbered = torch.zeros_like(tables)
    renumbered[used] = torch.arange(ids.shape[0], device=tables.device)
    return k_cache[ids].float(), v_cache[ids].float(), renumbered


def paged_decode_attention(query: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                           block_tables: torch.Tensor, context_lens: torch.Tensor,
                           scale: float, window: int = 0) -> torch.Tensor:
    """Triton `paged_decode_attention` (contract in the module docstring).

    Requires block_size to be a power of two (the kernel tiles the context by blocks). Tensors
    on CUDA, or on CPU under TRITON_INTERPRET=1.
    """
    group = check_shapes(query, k_cache, v_cache, block_tables, context_lens)
    block_size = k_cache.shape[1]
    if block_size & (block_size - 1):
        raise ValueError(f"block_size must be a power of two for the Triton kernel, got "
                         f"{block_size}")
    out = torch.empty_like(query)
    if query.shape[0] == 0:
        return out
    from agentix_kernels._decode_attention_triton import launch_paged_decode  # imports triton

    launch_paged_decode(query, k_cache, v_cache, block_tables, context_lens, scale, group, out,
                        window)
    return out
