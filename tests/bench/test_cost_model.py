import dataclasses

import pytest

from bench.sim.cost_model import CostModel, GPUPreset, ModelPreset, gpu_preset, model_preset


def make_cost(preset: str = "a100-80g", model: str = "llama-3.1-8b", **kwargs) -> CostModel:
    return CostModel.from_names(preset, model, **kwargs)


def test_decode_floor_is_reading_the_weights():
    # 8.03e9 params * 2 B = 16.06 GB over 2.0 TB/s = 8.03 ms, before any overhead.
    cost = make_cost(step_overhead=0.0, schedule_overhead=0.0)
    assert cost.step_seconds([(1, 1)]) >= 16e9 / 2.0e12
    assert cost.step_seconds([(1, 1)]) == pytest.approx(8.03e9 * 2 / 2.0e12, rel=1e-3)
    # overheads add on top
    assert make_cost().step_seconds([(1, 1)]) == pytest.approx(8.03e-3 + 2e-3, rel=1e-3)


def test_prefill_floor_is_the_dense_rate():
    cost = make_cost(step_overhead=0.0, schedule_overhead=0.0)
    n = 2048
    assert cost.step_seconds([(n, n)]) >= 2 * 8.0e9 * n / 312e12
    assert cost.step_seconds([(n, n)]) >= 2 * 8.03e9 * n / (312e12 * 0.6)


def test_kv_bytes_per_token_match_the_reference_table():
    assert model_preset("llama-3.1-8b").kv_bytes_per_token == 128 * 1024
    assert model_preset("llama-3.1-70b").kv_bytes_per_token == 320 * 1024


def test_monotone_in_tokens_and_context():
    cost = make_cost()
    assert cost.step_seconds([(1, 100)]) < cost.step_seconds([(1, 100_000)])
    assert cost.step_seconds([(512, 512)]) < cost.step_seconds([(1024, 1024)])
    assert cost.step_seconds([(1, 100)] * 8) < cost.step_seconds([(1, 100)] * 256)
    assert cost.step_seconds([(256, 4096)]) < cost.step_seconds([(256, 8192)])
    assert cost.step_seconds([]) == 0.0


def test_continuation_step_skips_the_schedule_overhead():
    cost = make_cost(step_overhead=1e-3, schedule_overhead=2e-3)
    assert (cost.step_seconds([(1, 10)]) - cost.step_seconds([(1, 10)], new_round=False)
            == pytest.approx(2e-3))


def test_tensor_parallel_divides_compute_and_bytes():
    gpu = gpu_preset("a100-80g")
    one = model_preset("llama-3.1-70b")
    four = dataclasses.replace(one, tensor_parallel=4)
    one = dataclasses.replace(one, tensor_parallel=1)
    c1 = CostModel(gpu, one, step_overhead=0.0, schedule_overhead=0.0)
    c4 = CostModel(gpu, four, step_overhead=0.0, schedule_overhead=0.0)
    for chunks in ([(1, 1000)], [(2048, 2048)]):
        new_tokens = sum(n for n, _ in chunks)
        assert c4.step_seconds(chunks) - c4.comm_seconds(new_tokens) == \
            pytest.approx(c1.step_seconds(chunks) / 4)
    # 70B on 4 A100s: 141.2 GB of weights over 8 TB/s = 17.65 ms per decode at least
    assert c4.step_seconds([(1, 1)]) >= 70.6e9 * 2 / (4 * 2.0e12)


def test_tensor_parallel_adds_its_all_reduces():
    """70B on 4 A100s: 80 layers x 2 + 2 = 162 all-reduces a step, each 15 us plus a ring's
    2 x 3/4 of the activations (8192 x 2 bytes a token) over 230 GB/s; none at tp 1."""
    c4 = CostModel(gpu_preset("a100-80g"), model_preset("llama-3.1-70b"))
    per_token = 162 * 1.5 * 8192 * 2 / 230e9
    assert c4.comm_seconds(1) == pytest.approx(162 * 15e-6 + per_token)
    assert c4.comm_seconds(64) == pytest.approx(162 * 15e-6 + 64 * per_token)
    falcon = CostModel(gpu_preset("a100-80g"), model_preset("falcon-180b"))
    assert falcon.comm_seconds(1) == pytest.approx(82 * (15e-6 + 1.75 * 14848 * 2 / 230e9))
    assert make_cost().comm_seconds(64) == 0.0  # 8B on one GPU


def test_falcon_180b_on_eight_a100s():
    """179.5e9 x 2 bytes of weights on 8 x 80 GB; KV: 2 x 80 layers x 8 KV heads x 64 x 2 =
    160 KiB a token."""
    falcon = CostModel(gpu_preset("a100-80g"), model_preset("falcon-180b"))
    assert falcon.model.kv_bytes_per_token == 160 * 1024
    assert falcon.kv_blocks(16) == int((8 * 80e9 - 179.5e9 * 2) * 0.9 // (16 * 160 * 1024))


def test_faster_gpus_are_faster():
    chunks = [(1, 2000)] * 64
    a100, h100, h200 = (make_cost(p).step_seconds(chunks) for p in ("a100-80g", "h100", "h200"))
    assert a100 > h100 > h200


def test_kv_blocks_fill_memory_left_after_weights():
    cost = make_cost(kv_utilization=0.9)
    expected = int((80e9 - 8.03e9 * 2) * 0.9 // (16 * 128 * 1024))
    assert cost.kv_blocks(16) == expected
    assert make_cost("h200").kv_blocks(16) > expected
    seventy = make_cost(model="llama-3.1-70b")
    assert seventy.kv_blocks(16) == int((4 * 80e9 - 70.6e9 * 2) * 0.9 // (16 * 320 * 1024))
    with pytest.raises(ValueError, match="block_size"):
        cost.kv_blocks(0)
    tiny = dataclasses.replace(gpu_preset("a100-80g"), memory_bytes=8e9)
    with pytest.raises(ValueError, match="model"):
        CostModel(tiny, model_preset("llama-3.1-8b")).kv_blocks(16)


def test_swap_is_one_bulk_transfer():
    cost = make_cost()
    bpb = cost.bytes_per_block(16)
    assert bpb == 2 * 1024 * 1024
    assert cost.swap_seconds(0, bpb) == 0.0
    assert cost.swap_seconds(100, bpb) == pytest.approx(100 * bpb / 25e9 + 1e-4)
    # one transfer of 200 blocks is cheaper than two of 100
    assert cost.swap_seconds(200, bpb) < 2 * cost.swap_seconds(100, bpb)


def test_unknown_presets_name_the_field():
    with pytest.raises(ValueError, match="preset"):
        gpu_preset("v100")
    with pytest.raises(ValueError, match="model"):
        model_preset("llama-2-7b")
    with pytest.raises(ValueError, match="preset"):
        CostModel.from_names("tpu", "llama-3.1-8b")


def test_bad_values_name_the_field():
    with pytest.raises(ValueError, match="efficiency"):
        dataclasses.replace(gpu_preset("h100"), efficiency=1.5)
    with pytest.raises(ValueError, match="hbm_bandwidth"):
        GPUPreset("x", 1e12, 0.5, 0.0, 1e9, 1e9, 0.0, 0.0)
    with pytest.raises(ValueError, match="tensor_parallel"):
        ModelPreset("m", 1, 8, 1, 1, 8, 8, 16, 1e3, tensor_parallel=0)
    with pytest.raises(ValueError, match="step_overhead"):
        make_cost(step_overhead=-1.0)
    with pytest.raises(ValueError, match="chunk"):
        make_cost().step_seconds([(10, 5)])


@pytest.mark.parametrize("name", ["qwen2.5-7b", "qwen2.5-72b", "qwen3-8b", "qwen3-32b"])
def test_the_family_presets_parameters_agree_with_their_shapes(name):
    """A typo in a preset's shapes or parameter count shows: the count from the shapes (untied
    heads; biases and q/k norms are under 0.1%) is within 1% of the published one."""
    preset = model_preset(name)
    counted = ModelPreset.from_hf_config(name, {
        "hidden_size": preset.hidden, "num_hidden_layers": preset.layers,
        "num_attention_heads": preset.q_heads, "num_key_value_heads": preset.kv_heads,
        "head_dim": preset.head_dim, "intermediate_size": preset.ffn,
        "vocab_size": preset.vocab}).params
    assert abs(counted / preset.params - 1) < 0.01
