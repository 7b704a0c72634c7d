import pytest

from bench.sim.baselines import BASELINES, DEFAULTS, engine_config_for
from engine.config import EngineConfig

# vLLM's multi-step: a round is not cut by new calls
OPTIMIZED = dict(enable_chunked_prefill=True, enable_prefix_caching=True, multistep=4,
                 multistep_yields=False)
NO_DEADLINE = dict(ttft_slo_tokens=None)


def scheduling(policy, memory):
    return dict(policy=policy, preemption_mode="auto", kv_memory=memory, **OPTIMIZED,
                **NO_DEADLINE)


def test_baselines_come_from_the_policy_registry_plus_the_ablations():
    assert {name: dict(fields) for name, fields in BASELINES.items()} == {
        "vllm": dict(policy="fcfs", preemption_mode="recompute", kv_memory="lru",
                     enable_chunked_prefill=False, enable_prefix_caching=False, multistep=1,
                     **NO_DEADLINE),
        "optimized": dict(policy="fcfs", preemption_mode="recompute", kv_memory="lru",
                          **OPTIMIZED, **NO_DEADLINE),
        "vllm06": dict(policy="fcfs", preemption_mode="recompute", kv_memory="lru",
                       enable_chunked_prefill=True, max_num_batched_tokens=512,
                       enable_prefix_caching=True, multistep=1, **NO_DEADLINE),
        "optimized-mem": scheduling("fcfs", "program"),
        "las": scheduling("las", "lru"),
        "mlfq": scheduling("mlfq", "lru"),
        "plas": scheduling("plas", "program"),
        "atlas": scheduling("atlas", "program"),
        "pfcfs": scheduling("pfcfs", "program"),
        "gittins": scheduling("gittins", "program"),
        "oracle": scheduling("oracle", "program"),
        "atlas-lru": scheduling("atlas", "lru"),
    }
    assert list(BASELINES) == ["vllm", "optimized", "vllm06", "optimized-mem", "las", "mlfq",
                               "plas", "atlas", "pfcfs", "gittins", "oracle", "atlas-lru"]


def test_vllm06_is_vllm_0_6_with_chunked_prefill_and_prefix_caching():
    config = engine_config_for("vllm06")
    assert (config["max_num_batched_tokens"], config["multistep"]) == (512, 1)
    assert (config["enable_chunked_prefill"], config["enable_prefix_caching"]) == (True, True)
    assert (config["policy"], config["preemption_mode"], config["kv_memory"]) == \
        ("fcfs", "recompute", "lru")
    assert config["max_num_seqs"] == engine_config_for("optimized")["max_num_seqs"] == 256
    assert engine_config_for("optimized")["max_num_batched_tokens"] == 8192
    EngineConfig.from_flat(model="m", **config)  # a valid engine


def test_baselines_cannot_be_changed():
    with pytest.raises(TypeError):
        BASELINES["atlas"]["kv_memory"] = "lru"
    with pytest.raises(TypeError):
        BASELINES["new"] = {}


def test_engine_config_layers_common_baseline_fields_then_overrides():
    config = engine_config_for("atlas-lru", {"multistep": 1, "max_num_seqs": 8},
                               num_kv_blocks=100, multistep=2)
    assert (config["policy"], config["kv_memory"], config["preemption_mode"]) == \
        ("atlas", "lru", "auto")
    assert (config["multistep"], config["max_num_seqs"], config["num_kv_blocks"]) == (1, 8, 100)
    assert (config["block_size"], config["dtype"]) == (16, "bfloat16")
    bare = engine_config_for("fcfs")  # a bare policy name: the engine's own kv_memory
    assert "kv_memory" not in bare and bare["preemption_mode"] == "auto"
    assert (bare["enable_prefix_caching"], bare["ttft_slo_tokens"]) == (False, None)


def test_defaults_is_the_engine_config_on_the_common_sizes():
    config = engine_config_for(DEFAULTS, {"max_num_seqs": 8})
    default = EngineConfig()
    assert config == dict(
        block_size=16, max_num_seqs=8, max_num_batched_tokens=8192, service_mode="time",
        dtype="bfloat16", policy=default.policy,
        enable_prefix_caching=default.enable_prefix_caching,
        enable_chunked_prefill=default.scheduler.enable_chunked_prefill,
        preemption_mode=default.scheduler.preemption_mode,
        kv_memory=default.scheduler.kv_memory, multistep=default.scheduler.multistep,
        multistep_yields=default.scheduler.multistep_yields,
        ttft_slo_tokens=default.scheduler.ttft_slo_tokens)
    assert DEFAULTS not in BASELINES  # sweeps and capacity runs compare the baselines only


def test_engine_config_rejects_unknown_policies_and_fields():
    with pytest.raises(ValueError, match="policy must be one of"):
        engine_config_for("round-robin")
    with pytest.raises(ValueError, match="unknown field"):
        engine_config_for("atlas", {"no_such_field": 1})
