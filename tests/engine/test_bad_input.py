"""Bad input gets a ValueError naming the field, and the engine stays usable."""

from __future__ import annotations

import pytest

from engine import LLM, EngineConfig, SamplingParams
from engine.text_codec import TextCodec


@pytest.fixture(scope="module")
def llm(tiny_llama_dir):
    return LLM(tiny_llama_dir, block_size=8, num_kv_blocks=64, max_model_len=64)


def still_works(llm):
    out = llm.generate([[5, 6, 7]], SamplingParams(max_tokens=3, ignore_eos=True))
    assert len(out[0].token_ids) == 3
    llm.engine.check_integrity()
    assert not llm.engine.has_unfinished_calls()
    assert llm.engine.kv.num_free_blocks == llm.engine.kv.pool.num_usable


@pytest.mark.parametrize("prompt, field", [
    ([], "prompt"),
    ("", "prompt"),
    (list(range(3, 3 + 64)), "prompt"),
    ([5, 384], "prompt: token id 384"),
    ([5, -1], "prompt: token id -1"),
    ([5, 6.0], "prompt: token id 6.0"),
    ([5, "6"], "prompt: token id '6'"),
    ([5, None], "prompt: token id None"),
    ([5, 2**70], f"prompt: token id {2**70}"),
])
def test_bad_prompts(llm, prompt, field):
    with pytest.raises(ValueError, match=field):
        llm.generate([[5, 6], prompt], SamplingParams(max_tokens=2))
    still_works(llm)


@pytest.mark.parametrize("kwargs, field", [
    (dict(max_tokens=0), "max_tokens"),
    (dict(max_tokens=-3), "max_tokens"),
    (dict(top_p=0.0), "top_p"),
    (dict(top_p=1.5), "top_p"),
    (dict(temperature=-1.0), "temperature"),
    (dict(top_k=-2), "top_k"),
])
def test_bad_sampling_params(llm, kwargs, field):
    with pytest.raises(ValueError, match=field):
        SamplingParams(**kwargs)
    still_works(llm)


def test_bool_token_ids_are_ints():
    # True and False are the ids 1 and 0 (bool is an int); nothing else that is not an int is.
    codec = TextCodec(None, vocab_size=16, max_model_len=64)
    assert codec.tokenize_prompt([True, 5]) == [True, 5]


def test_prompt_longer_than_the_context_is_refused_by_the_engine(llm):
    with pytest.raises(ValueError, match="prompt: 70 tokens"):
        llm.engine.add_call(None, list(range(3, 73)))
    assert not llm.engine.has_unfinished_calls()
    still_works(llm)


@pytest.mark.parametrize("kwargs, field", [
    (dict(block_size=0), "block_size"),
    (dict(preemption_mode="drop"), "preemption_mode"),
    (dict(preemption_mode="swap"), "num_host_blocks"),
    (dict(dtype="int8"), "dtype"),
    (dict(multistep=0), "multistep"),
])
def test_bad_engine_config(kwargs, field):
    with pytest.raises(ValueError, match=field):
        EngineConfig.from_flat(model="x", **kwargs)


def test_unknown_config_override(tiny_llama_dir):
    with pytest.raises(ValueError, match="no_such_knob"):
        LLM(tiny_llama_dir, no_such_knob=1)


@pytest.mark.parametrize("kwargs, field", [
    (dict(temperature=float("nan")), "temperature"),
    (dict(temperature=float("inf")), "temperature"),
    (dict(seed=-1), "seed"),
    (dict(seed=2**63), "seed"),
    (dict(seed=1.5), "seed"),
])
def test_bad_temperature_and_seed(kwargs, field):
    with pytest.raises(ValueError, match=field):
        SamplingParams(**kwargs)


def test_extreme_but_valid_sampling_values_run(llm):
    params = [SamplingParams(temperature=1e-30, max_tokens=3, ignore_eos=True),
              SamplingParams(temperature=1.0, seed=2**63 - 1, max_tokens=3, ignore_eos=True)]
    outs = llm.generate([[5, 6, 7], [5, 6, 7]], params)
    greedy = llm.generate([[5, 6, 7]], SamplingParams(max_tokens=3, ignore_eos=True))[0]
    assert outs[0].token_ids == greedy.token_ids
    assert len(outs[1].token_ids) == 3
    still_works(llm)


@pytest.mark.parametrize("value", [0, -1.0, float("nan"), 86_401.0, "2"])
def test_bad_first_token_deadline_is_refused_and_records_nothing(llm, value):
    engine = llm.engine
    with pytest.raises(ValueError, match="ttft_slo_seconds"):
        engine.add_call(None, [5, 6, 7], SamplingParams(max_tokens=2), ttft_slo_seconds=value)
    assert not engine.has_unfinished_calls()
    still_works(llm)


def test_a_first_token_deadline_reaches_the_calls_record(llm):
    engine = llm.engine
    call_id = engine.add_call(None, [5, 6, 7], SamplingParams(max_tokens=2),
                              ttft_slo_seconds=1.5)
    assert engine.scheduler.records[call_id].ttft_slo == 1.5
    while engine.has_unfinished_calls():
        engine.step()
    engine.pop_completion(call_id)
    still_works(llm)
