"""Constrained decoding libraries compared: mask cost and compile time (`python -m
bench.studies.grammar.cost`)."""
