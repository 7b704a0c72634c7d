"""The simulator and what it runs on: traces and their workload generators, the named engine
configurations, the cost model, one or many simulated engines on a virtual clock, and the
program-level metrics of a run. Imports nothing else from bench."""
