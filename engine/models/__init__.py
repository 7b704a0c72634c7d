"""Llama-family models, their layers, and the offline SmolLM2 conversion."""
