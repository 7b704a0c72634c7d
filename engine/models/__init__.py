"""The decoder (Llama; Qwen2/Qwen3 as its flags; Mistral without a sliding window), its
layers, the architecture registry, and the offline SmolLM2 conversion."""
