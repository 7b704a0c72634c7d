"""Workload generators: each module's `generate(num_programs, seed, rate) -> Trace`."""
