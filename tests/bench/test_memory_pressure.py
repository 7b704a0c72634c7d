import pytest

from bench.cli import _engine_overrides, build_parser
from bench.sim.memory_pressure import kv_block_overrides, kv_blocks_at, parse_memory_pressure

DEFAULT_BLOCKS = 27_440  # Llama-3.1-8B on the A100-80GB, 16-token blocks


def test_parse():
    assert parse_memory_pressure("1/4") == 0.25
    assert parse_memory_pressure("1/8") == 0.125
    assert parse_memory_pressure("0.5") == 0.5
    assert parse_memory_pressure("1") == 1.0


@pytest.mark.parametrize("text", ["0", "2", "-1/4", "1/0", "quarter", ""])
def test_bad_pressures_name_the_field(text):
    with pytest.raises(ValueError, match="^memory_pressure:"):
        parse_memory_pressure(text)


def test_presets_block_counts():
    assert kv_blocks_at(1.0, "a100-80g", "llama-3.1-8b") == DEFAULT_BLOCKS
    assert kv_blocks_at(0.25, "a100-80g", "llama-3.1-8b") == 6_860
    assert kv_blocks_at(0.125, "a100-80g", "llama-3.1-8b") == 3_430
    assert kv_blocks_at(0.125, "h200", "llama-3.1-70b") == 9_072  # 72,578 / 8
    assert kv_blocks_at(0.25, "a100-80g", "llama-3.1-8b", block_size=32) == 3_430
    assert kv_block_overrides(1.0, "a100-80g", "llama-3.1-8b") == {}
    assert kv_block_overrides(0.25, "a100-80g", "llama-3.1-8b") == {"num_kv_blocks": 6_860}
    with pytest.raises(ValueError, match="^memory_pressure: .* needs at least 2"):
        kv_blocks_at(1e-5, "a100-80g", "llama-3.1-8b")


def test_cli_overrides_and_errors(capsys):
    parser = build_parser()
    args = parser.parse_args(["sim", "--workload", "lats", "--memory-pressure", "1/8"])
    assert _engine_overrides(args) == {"num_kv_blocks": 3_430}
    args = parser.parse_args(["capacity", "--workload", "lats", "--memory-pressure", "1/4",
                              "--set", "num_kv_blocks=100"])
    assert _engine_overrides(args) == {"num_kv_blocks": 100}  # --set wins
    with pytest.raises(SystemExit) as exc:
        parser.parse_args(["sim", "--workload", "lats", "--memory-pressure", "3"])
    assert exc.value.code == 2
    assert "--memory-pressure: memory_pressure: must be in (0, 1]" in capsys.readouterr().err
