"""Workload generators: each module's `generate(num_programs, seed, rate) -> Trace`."""

WORKLOADS = ("sharegpt", "bfcl", "lats", "mixed", "coding")  # the modules, by name
