"""One-off studies, each a module (or a small package) run with `python -m`. A study imports
`bench.sim`, `bench.analysis` and `bench.support`, never another study; the exceptions:
`gpu_check` runs `swap_bench`'s measurement on the GPU, and `grpc_runs` takes `bench.cli`'s
real-run options."""
