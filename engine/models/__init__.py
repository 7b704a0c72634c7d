"""The decoders (Llama; Qwen2/Qwen3 and Mistral as its flags; Falcon), their layers, the
architecture registry, and the offline SmolLM2 conversion."""
