"""Measurements over the simulator and their reports: rate sweeps, capacity at a latency target
(finite traces and steady state), knob sensitivity, the calibrated simulator against the real
engine. Imports `bench.sim` only."""
