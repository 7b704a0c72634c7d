"""The offline API: `LLM(model_dir, **config_overrides).generate(prompts, params)`."""

from __future__ import annotations

from typing import Sequence

from engine.config import EngineConfig
from engine.llm_engine import LLMEngine, Prompt
from engine.outputs import CompletionOutput
from engine.sampling_params import SamplingParams
from engine.chat_prompt import ChatPrompt


class LLM:
    def __init__(self, model: str, **config_overrides) -> None:
        """`config_overrides`: engine and scheduler fields alike, by name
        (`EngineConfig.from_flat`; ValueError naming an unknown one)."""
        self.engine = LLMEngine(EngineConfig.from_flat(model=str(model), **config_overrides))

    def close(self) -> None:
        """Stop the engine's tensor-parallel workers, if any (idempotent; also at exit)."""
        self.engine.close()

    def __enter__(self) -> "LLM":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def generate(self, prompts: Prompt | Sequence[Prompt],
                 params: SamplingParams | Sequence[SamplingParams] | None = None
                 ) -> list[CompletionOutput]:
        """Run every prompt to completion; one output per prompt, in order. A single prompt
        (a string, a ChatPrompt or a list of token ids) is treated as a batch of one. If any
        prompt is invalid, nothing is submitted and the ValueError names the field."""
        if isinstance(prompts, (str, ChatPrompt)) or (prompts and isinstance(prompts[0], int)):
            prompts = [prompts]
        if params is None or isinstance(params, SamplingParams):
            params = [params or SamplingParams()] * len(prompts)
        if len(params) != len(prompts):
            raise ValueError(f"params: {len(params)} given for {len(prompts)} prompts")
        token_ids = [self.engine.tokenize_prompt(p) for p in prompts]
        ids: list[str] = []
        try:
            for t, sp in zip(token_ids, params):
                ids.append(self.engine.add_call(None, t, sp))
            while self.engine.has_unfinished_calls():
                self.engine.step()
        except Exception:  # re-raised: a call refused, or a step failed
            self._take_back(ids)
            raise
        return [self.engine.pop_completion(i) for i in ids]

    def _take_back(self, call_ids: list[str]) -> None:
        """Abort the calls `generate` added that are still running (freeing their blocks)
        and drop all of their results: the engine keeps none of them."""
        for call_id in call_ids:
            self.engine.abort_call(call_id)
            self.engine.pop_completion(call_id)
