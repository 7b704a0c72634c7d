"""Real-engine and server plumbing several studies share: one measurement per fresh process,
the two halves of the throughput benchmark, a trace replayed on the real engine, calibration of
the cost model, a server run as a child process, vLLM's side of a comparison. Imports
`bench.sim` only."""
