"""Tensor parallelism: a model split Megatron-style over `tensor_parallel_size` ranks.

`layout` (which slices a rank holds), `layers` (the sharded modules), `comm` (the
collectives, over torch.distributed), `executor` (rank 0's executor), `workers` and
`worker` (ranks 1..N-1 as processes of their own).
"""
