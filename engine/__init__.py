"""Agentix engine: config, calls, the step loop, the model runner and the offline API."""

from engine.chat_prompt import ChatPrompt
from engine.config import EngineConfig
from engine.llm import LLM
from engine.llm_engine import LLMEngine
from engine.outputs import CompletionOutput, StepOutput
from engine.sampling_params import SamplingParams
from engine.stats import EngineStats

__all__ = ["LLM", "LLMEngine", "EngineConfig", "SamplingParams", "CompletionOutput", "StepOutput",
           "EngineStats", "ChatPrompt"]
