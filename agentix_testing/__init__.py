"""Test fixtures the tests and the benchmarks share: tiny random checkpoints as HF
directories and their transformers reference."""
