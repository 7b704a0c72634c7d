"""The configuration seams: one set of defaults (EngineConfig's, the serving ones, which
`agentix serve`, `agentix generate`, `LLM` and `agentix bench sim` take without restating),
flat overrides routed into EngineConfig and its SchedulerConfig, the up-front checks of
block_size and device, the one KVCacheSpec the engine and its runner share, and an engine
with an injected executor built from model arguments (no directory)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from bench.cli import build_parser as bench_parser
from bench.sim.baselines import engine_config_for
from bench.sim.cost_model import CostModel
from bench.sim.sim_executor import VirtualClock
from bench.sim.simulate import PromptMaker, sim_engine, sim_engine_config
from bench.sim.trace import Trace
from engine import LLM, EngineConfig, LLMEngine, SamplingParams
from engine.executor import StepResult
from engine.loader import ModelInfo
from scheduler.config import SchedulerConfig
from scheduler.plan import SchedulePlan
from server.cli import build_parser
from server.cli_checks import engine_config

HF_CONFIG = dict(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                 num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=128,
                 eos_token_id=[1, 2])
EOS = 1
# The serving defaults (issue 42): EngineConfig's, so every entry point's.
SERVING_DEFAULTS = dict(policy="gittins", enable_prefix_caching=True, kv_memory="program",
                        preemption_mode="auto", ttft_slo_tokens=2048)


class EchoExecutor:
    """Samples `token` for every chunk that samples (no model)."""

    def __init__(self, token: int) -> None:
        self.token = token

    def execute(self, plan: SchedulePlan) -> StepResult:
        return StepResult([self.token if c.samples else None for c in plan.chunks])


def test_the_engine_defaults_are_the_serving_ones():
    defaults = EngineConfig().as_flat()
    assert {name: defaults[name] for name in SERVING_DEFAULTS} == SERVING_DEFAULTS


def test_every_entry_point_takes_the_engine_defaults(tiny_llama_dir):
    parser = build_parser()
    assert engine_config(parser.parse_args(["serve"]), "m") == EngineConfig(model="m")
    assert parser.parse_args(["generate"]).policy == EngineConfig().policy
    assert LLM(tiny_llama_dir).engine.config == EngineConfig(model=tiny_llama_dir)
    sim = bench_parser().parse_args(["sim", "--workload", "mixed"])
    simulated = EngineConfig.from_flat(**engine_config_for(sim.policy)).as_flat()
    defaults = EngineConfig().as_flat()
    # only the simulator's sizing (the baselines' common fields) is its own
    assert {name for name, value in simulated.items() if value != defaults[name]} == \
        {"max_num_seqs", "max_num_batched_tokens", "dtype"}


def test_flat_overrides_route_engine_and_scheduler_fields():
    config = EngineConfig.from_flat(max_num_seqs=4, policy="atlas", block_size=8,
                                    starvation_beta=None, num_kv_blocks=32)
    assert (config.policy, config.block_size, config.num_kv_blocks) == ("atlas", 8, 32)
    assert config.scheduler == SchedulerConfig(max_num_seqs=4, starvation_beta=None)
    assert EngineConfig.from_flat() == EngineConfig()
    assert EngineConfig.from_flat(**config.as_flat()) == config
    assert config.as_flat().keys() == EngineConfig.flat_field_types().keys()


def test_llm_takes_scheduler_fields_as_keywords(tiny_llama_dir):
    llm = LLM(tiny_llama_dir, max_num_seqs=2, multistep=3, num_kv_blocks=16, policy="atlas")
    config = llm.engine.config
    assert (config.scheduler.max_num_seqs, config.scheduler.multistep, config.policy) == \
        (2, 3, "atlas")
    assert llm.engine.num_free_seats == 2


def test_unknown_fields_are_named():
    with pytest.raises(ValueError, match=r"unknown engine config field\(s\): \['nope', 'zzz'\]"):
        EngineConfig.from_flat(zzz=1, nope=2, max_num_seqs=4)
    for engine_filled in ("bytes_per_block", "scheduler"):
        with pytest.raises(ValueError, match=engine_filled):
            EngineConfig.from_flat(**{engine_filled: 1})


def test_bad_scheduler_values_name_the_field():
    with pytest.raises(ValueError, match="max_num_seqs must be positive, got 0"):
        EngineConfig.from_flat(max_num_seqs=0)
    with pytest.raises(ValueError, match="preemption_mode='keep' needs enable_prefix_caching"):
        EngineConfig.from_flat(preemption_mode="keep", enable_prefix_caching=False)


@pytest.mark.parametrize("block_size", [12, 0, -8, 3, 24])
def test_block_size_must_be_a_power_of_two(block_size):
    with pytest.raises(ValueError, match=f"block_size must be a power of two, got {block_size}$"):
        EngineConfig(block_size=block_size)


@pytest.mark.parametrize("block_size", [1, 2, 16, 256])
def test_powers_of_two_are_block_sizes(block_size):
    assert EngineConfig(block_size=block_size).block_size == block_size


@pytest.mark.parametrize("device", ["mps", "meta", "tpu", "cuda:x", "cuda:-1", "", 0, None])
def test_device_must_be_cpu_or_cuda(device):
    with pytest.raises(ValueError, match=f"device must be cpu, cuda or cuda:N, got {device!r}"):
        EngineConfig(device=device)


@pytest.mark.parametrize("device", ["cpu", "cuda", "cuda:7"])
def test_device_form_is_checked_not_its_presence(device):
    assert EngineConfig(device=device).device == device


@pytest.mark.parametrize("fields", [dict(num_kv_blocks=16), dict(kv_cache_memory_gb=2**-14)])
def test_engine_and_runner_share_one_kv_cache_spec(tiny_llama_dir, fields):
    engine = LLMEngine(EngineConfig(model=tiny_llama_dir, block_size=8, **fields))
    spec = engine.runner.kv_spec
    assert engine.kv_spec is spec
    cache = engine.runner.kv_cache
    assert spec.bytes_per_block == cache[0].numel() * cache.element_size()
    assert engine.scheduler.config.bytes_per_block == spec.bytes_per_block
    assert engine.kv.pool.num_blocks == spec.num_blocks == cache.shape[0]


def test_injected_executor_engine_takes_model_arguments_without_a_directory():
    config = EngineConfig.from_flat(model="no/such/dir", block_size=4, num_kv_blocks=16,
                                    num_host_blocks=4, preemption_mode="swap")
    engine = LLMEngine(config, executor=EchoExecutor(EOS),
                       model=ModelInfo.from_hf_config(HF_CONFIG))
    assert (engine.vocab_size, engine.eos_token_ids, engine.tokenizer) == (64, {1, 2}, None)
    assert engine.kv_spec.num_blocks == 16
    assert engine.scheduler.config.bytes_per_block == engine.kv_spec.bytes_per_block \
        == 2 * 2 * 4 * 1 * 8 * 4  # layers, K/V, block_size, kv heads, head dim, fp32
    call_id = engine.add_call(None, [5, 6, 7], SamplingParams(max_tokens=4))
    while engine.has_unfinished_calls():
        engine.step()
    done = engine.pop_completion(call_id)
    assert (done.token_ids, done.finish_reason, done.text) == ([EOS], "stop", "")
    engine.check_integrity()


def test_without_a_tokenizer_only_text_is_refused():
    engine = LLMEngine(EngineConfig(num_kv_blocks=16), executor=EchoExecutor(EOS),
                       model=ModelInfo.from_hf_config(HF_CONFIG))
    with pytest.raises(ValueError, match="prompt: text and chat prompts need a tokenizer"):
        engine.add_call(None, "hello")
    with pytest.raises(ValueError, match="stop: stop strings need a tokenizer"):
        engine.add_call(None, [5, 6], SamplingParams(stop=("w3",)))
    assert not engine.has_unfinished_calls()


def test_model_arguments_need_an_injected_executor():
    with pytest.raises(ValueError, match="model: a ModelInfo needs an injected executor"):
        LLMEngine(EngineConfig(), model=ModelInfo.from_hf_config(HF_CONFIG))


def test_the_simulator_writes_no_model_directory(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    cost = CostModel.from_names("a100-80g", "llama-3.1-8b")
    config = sim_engine_config(Trace(()), "atlas", cost)
    engine, _ = sim_engine(config, cost, VirtualClock(), PromptMaker(cost.model.vocab))
    assert not (Path(tempfile.gettempdir()) / "agentix-sim-models").exists()
    assert list(tmp_path.iterdir()) == []
    assert engine.kv_spec.num_blocks == config["num_kv_blocks"]
    assert engine.eos_token_ids == {cost.model.hf_config()["eos_token_id"]}
