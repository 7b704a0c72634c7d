"""Workload generators: each module's `generate(num_programs, seed, rate) -> Trace`."""

WORKLOADS = ("sharegpt", "bfcl", "lats", "mixed", "coding", "lats_stop", "coding_swe",
             "mapreduce")  # the modules, by name
