"""bench.studies.throughput's repeats: the ratio of a repeat and the whole loop with the
measurements scripted (which side runs first and the spread: tests/bench/test_repeats.py)."""

import pytest

from bench.studies import throughput


def test_best_ratio_is_fastest_agentix_over_fastest_transformers():
    runs = [("agentix, max_num_seqs 64", {"tokens_per_s": 180.0}),
            ("agentix, max_num_seqs 128", {"tokens_per_s": 150.0}),
            ("transformers generate, batch 8", {"tokens_per_s": 40.0}),
            ("transformers generate, batch 32", {"tokens_per_s": 60.0})]
    assert throughput.best_ratio(runs) == ("agentix, max_num_seqs 64", pytest.approx(3.0))


def test_repeats_alternate_and_report_each_ratio(monkeypatch, capsys):
    order = []

    def fake_run(target, kwargs):
        side = "hf" if "hf_baseline" in target else "agentix"
        order.append(side)
        speed = 60.0 if side == "hf" else 120.0 + 30.0 * (len(order) > 2)
        return dict(tokens=100, seconds=1.0, tokens_per_s=speed, peak_rss_mb=10.0)

    monkeypatch.setattr(throughput, "run_in_subprocess", fake_run)
    import bench.sim.sharegpt as sharegpt
    import engine.models.smollm2 as smollm2
    import transformers
    monkeypatch.setattr(smollm2, "ensure_smollm2_dir", lambda: "/nowhere")
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda path: None)
    monkeypatch.setattr(sharegpt, "sample_requests", lambda *a: [])
    monkeypatch.setattr(sharegpt, "describe", lambda requests: "no requests")
    throughput.main(["--hf-batch-sizes", "32", "--repeats", "2"])
    assert order == ["agentix", "hf", "hf", "agentix"]
    out = capsys.readouterr().out
    assert "repeat 0: best agentix: agentix, max_num_seqs 64, 2.00x" in out
    assert "repeat 1: best agentix: agentix, max_num_seqs 64, 2.50x" in out
    assert "per repeat: 2.00x, 2.50x: min 2.00x / median 2.25x / max 2.50x" in out


def test_repeats_must_be_positive():
    with pytest.raises(SystemExit):
        throughput.main(["--repeats", "0"])
