"""attention_speed: one step's decode attention over SmolLM2's 30 layers on the engine's KV
layout, its figures, the bit-for-bit check against a saved output, and its argument bounds."""

import json
from unittest import mock

import pytest
import torch

from agentix_kernels.native import decode_attention as native_decode_attention
from bench.studies.attention_speed import HEAD_DIM, HEADS, KV_HEADS, LAYERS, main, measure


def test_figures_and_outputs_of_one_step():
    figures, out = measure(batch=3, min_context=5, max_context=40, steps=2)
    assert out.shape == (LAYERS, 3, HEADS, HEAD_DIM)
    assert figures["path"] in ("native", "reference")
    assert (figures["batch"], figures["steps"]) == (3, 2)
    assert 0 < figures["fastest_ms"] <= figures["median_ms"]
    assert figures["gb_per_s"] == pytest.approx(
        figures["kv_bytes"] / figures["median_ms"] * 1e3 / 1e9)
    # K and V of every layer for every context token, float32
    per_token = 2 * LAYERS * KV_HEADS * HEAD_DIM * 4
    assert figures["kv_bytes"] % per_token == 0
    assert 3 * 5 <= figures["kv_bytes"] // per_token <= 3 * 40


def test_the_same_seed_gives_the_same_inputs_and_outputs():
    _, first = measure(batch=2, min_context=17, max_context=17, steps=1)
    _, again = measure(batch=2, min_context=17, max_context=17, steps=1)
    assert torch.equal(first, again)


def test_save_then_against_is_identical_and_another_output_is_not(tmp_path, capsys):
    saved = tmp_path / "out.pt"
    main(["--batch", "2", "--min-context", "9", "--max-context", "30", "--steps", "1",
          "--save", str(saved)])
    assert "identical" not in json.loads(capsys.readouterr().out)
    same = main(["--batch", "2", "--min-context", "9", "--max-context", "30", "--steps", "1",
                 "--against", str(saved)])
    assert same["identical"] is True
    torch.save(torch.load(saved) + 1.0, saved)
    assert main(["--batch", "2", "--min-context", "9", "--max-context", "30", "--steps", "1",
                 "--against", str(saved)])["identical"] is False


def test_the_native_step_is_the_reference_step():
    """Where the native kernel runs, its outputs are the torch reference's on the same
    inputs, to float32 rounding: the study times the attention the engine computes."""
    figures, out = measure(batch=2, min_context=20, max_context=33, steps=1)
    if figures["path"] == "reference":
        pytest.skip("no native kernel here: both sides would be the reference")
    with mock.patch.object(native_decode_attention, "supports", return_value=False):
        reference_figures, reference = measure(batch=2, min_context=20, max_context=33, steps=1)
    assert reference_figures["path"] == "reference"
    torch.testing.assert_close(out, reference, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("argv, message", [
    (["--batch", "0"], "--batch must be in [1, 1024], got 0"),
    (["--steps", "1001"], "--steps must be in [1, 1000], got 1001"),
    (["--min-context", "50", "--max-context", "40"],
     "--min-context (50) exceeds --max-context (40)"),
    (["--max-context", "40000"], "--max-context must be in [1, 32768], got 40000"),
    (["--batch", "1024", "--max-context", "32768"],
     "--batch 1024 x --max-context 32768 may need a 1440.0 GiB cache, over 16 GiB"),
    (["--against", "/nonexistent/out.pt"], "--against: no file /nonexistent/out.pt"),
])
def test_bad_arguments_are_refused_by_name(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2 and message in capsys.readouterr().err
