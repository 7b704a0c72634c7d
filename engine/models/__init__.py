"""The decoder (Llama, and Qwen2/Qwen3 as its flags), its layers, the architecture registry,
and the offline SmolLM2 conversion."""
