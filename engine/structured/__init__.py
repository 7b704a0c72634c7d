"""Constrained decoding: a call's output held to a grammar (JSON Schema, with literal text
around it), one mask per step over the vocabulary."""
