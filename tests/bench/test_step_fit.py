import json
from pathlib import Path

import pytest

from bench.sim.cost_model import CostModel, ModelPreset, batch_totals
from bench.support.step_fit import StepSample, cpu_preset, fit_step_times, model_preset_for

SMOLLM2_LIKE = {"hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30,
                "num_attention_heads": 9, "num_key_value_heads": 3, "head_dim": 64,
                "vocab_size": 49152, "tie_word_embeddings": True}


def test_model_preset_from_hf_config_counts_the_parameters(tiny_llama):
    model_dir, hf_model = tiny_llama
    preset = model_preset_for(model_dir)
    assert preset.params == sum(p.numel() for p in hf_model.parameters())
    cfg = json.loads((Path(model_dir) / "config.json").read_text())
    assert (preset.layers, preset.hidden, preset.q_heads, preset.kv_heads, preset.head_dim,
            preset.vocab, preset.dtype_bytes) == (cfg["num_hidden_layers"], cfg["hidden_size"],
                                                  4, 2, 16, 384, 4)


def test_step_work_is_what_step_seconds_rates():
    model = ModelPreset.from_hf_config("smol", SMOLLM2_LIKE)
    assert model.params == pytest.approx(134.5e6, rel=1e-3)
    cost = CostModel(cpu_preset(50e9, 20e9), model, 0.004, 0.001)
    chunks = [(1, 40), (1, 300), (64, 64)]
    flops, nbytes = cost.step_work(*batch_totals(chunks))
    assert cost.step_seconds(chunks) == pytest.approx(0.005 + max(flops / 50e9, nbytes / 20e9))
    assert cost.step_seconds(chunks, new_round=False) == pytest.approx(
        0.004 + max(flops / 50e9, nbytes / 20e9))
    assert batch_totals([(4, 10), (1, 7)]) == (5, 4 * 10 - 6 + 7, 17)
    with pytest.raises(ValueError, match="chunk"):
        batch_totals([(5, 4)])


def synthetic_samples(cost):
    shapes = [((n, n),) for n in (1, 8, 32, 128, 512)]
    shapes += [((1, ctx),) * b for b in (1, 2, 4, 8) for ctx in (20, 300)]
    shapes += [((1, 50),) * b + ((32, 96),) for b in (1, 3)]
    return [StepSample(tuple(s), new_round, cost.step_seconds(s, new_round))
            for s in shapes for new_round in (True, False)]


@pytest.mark.parametrize("weigh_by_calls", [False, True])
def test_fit_recovers_known_constants(weigh_by_calls):
    model = ModelPreset.from_hf_config("smol", SMOLLM2_LIKE)
    truth = CostModel(cpu_preset(50e9, 20e9), model, 0.004, 0.001)
    fit = fit_step_times(synthetic_samples(truth), model, weigh_by_calls)
    assert fit.flops_rate == pytest.approx(50e9, rel=0.01)
    assert fit.byte_rate == pytest.approx(20e9, rel=0.01)
    assert fit.step_overhead == pytest.approx(0.004, rel=0.01)
    assert fit.schedule_overhead == pytest.approx(0.001, rel=0.01)
    assert fit.rms_rel_error < 1e-6 and fit.num_samples == len(synthetic_samples(truth))


def test_fit_needs_both_kinds_of_steps():
    model = ModelPreset.from_hf_config("smol", SMOLLM2_LIKE)
    truth = CostModel(cpu_preset(50e9, 20e9), model, 0.004, 0.001)
    one_shape = [StepSample(((1, 20),), r, truth.step_seconds([(1, 20)], r))
                 for r in (True, False, True, False)]  # one flops/bytes ratio only
    with pytest.raises(ValueError, match="both"):
        fit_step_times(one_shape, model)
    with pytest.raises(ValueError, match="at least 4"):
        fit_step_times(one_shape[:3], model)
    with pytest.raises(ValueError, match="positive"):
        fit_step_times([StepSample(s.chunks, s.new_round, 0.0)
                            for s in synthetic_samples(truth)], model)

