"""Logprobs of sampled tokens are transformers' log_softmax of the model's raw logits at each
position (before temperature and top-p), with the top alternatives in transformers' order,
for greedy and sampled calls batched with calls that ask for none."""

from __future__ import annotations

import pytest
import torch

from engine import LLM, SamplingParams

pytestmark = pytest.mark.usefixtures("one_torch_thread")

PROMPTS = [[5, 9, 33, 2, 17], [40, 41, 42], [7, 7, 7, 7, 7, 7, 7, 7, 7]]


def hf_logprobs(model, prompt: list[int], generated: list[int]) -> torch.Tensor:
    """transformers' log_softmax at the positions that produced `generated`: `[n, V]`."""
    ids = torch.tensor([prompt + generated])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1:-1].float()
    return torch.log_softmax(logits, dim=-1)


def test_logprobs_are_transformers_raw_log_softmax(tiny_tied_llama):
    model_dir, model = tiny_tied_llama
    params = [SamplingParams(max_tokens=6, ignore_eos=True, logprobs=3),
              SamplingParams(max_tokens=6, ignore_eos=True),  # asks for none
              SamplingParams(max_tokens=6, ignore_eos=True, temperature=1.5, top_p=0.8,
                             seed=7, logprobs=0)]
    with LLM(model_dir, block_size=8, num_kv_blocks=40) as llm:
        outs = llm.generate(PROMPTS, params)
    assert outs[1].logprobs is None
    for out, prompt, k in ((outs[0], PROMPTS[0], 3), (outs[2], PROMPTS[2], 0)):
        expected = hf_logprobs(model, prompt, out.token_ids)
        assert [lp.token_id for lp in out.logprobs] == out.token_ids
        got = torch.tensor([lp.logprob for lp in out.logprobs])
        want = expected.gather(1, torch.tensor(out.token_ids)[:, None]).squeeze(1)
        torch.testing.assert_close(got, want, atol=1e-4, rtol=0)
        for lp, row in zip(out.logprobs, expected):
            top = row.topk(k) if k else None
            assert [t for t, _ in lp.top] == ([] if top is None else top.indices.tolist())
            if top is not None:
                torch.testing.assert_close(torch.tensor([v for _, v in lp.top]), top.values,
                                           atol=1e-4, rtol=0)
    # Greedy: the sampled token is the most likely one.
    assert all(lp.top[0] == (lp.token_id, lp.logprob) for lp in outs[0].logprobs)


@pytest.mark.parametrize("bad", [-1, 21, 2.0, True])
def test_a_bad_logprobs_count_is_refused(bad):
    with pytest.raises(ValueError, match=r"logprobs: must be an integer in \[0, 20\]"):
        SamplingParams(logprobs=bad)
