"""bench.studies.vs_vllm's pure parts: the options, vLLM's thread settings, the served Agentix
engine being the offline one, the agreement count, the ratios, and the whole loop with the
runs scripted (which engine goes first, the summary, Agentix alone without vLLM)."""

from __future__ import annotations

import os

import pytest

from bench.report.records import load_studies
from bench.sim.baselines import PLAIN
from bench.studies import vs_vllm
from bench.studies.vs_vllm import Setup


def _setup(device: str = "cpu", threads: int = 2, vllm_python: str | None = "/v/python"
           ) -> Setup:
    return Setup("/model", device, "float32", threads, 64, 2.5, False, vllm_python)


def test_the_defaults_are_the_throughput_study_s_requests_on_every_core():
    args = vs_vllm.parse_args([])
    assert (args.num, args.seed, args.max_prompt_tokens, args.max_output_tokens) == \
        (64, 0, 512, 256)
    assert args.threads == len(os.sched_getaffinity(0))
    assert (args.serve, args.vllm_python, args.no_install, args.vllm_enforce_eager) == \
        (False, None, False, False)
    args = vs_vllm.parse_args(["--num", "8", "--max-output-tokens", "32", "--repeats", "2",
                               "--serve", "--vllm-python", "/p", "--threads", "1"])
    assert (args.num, args.max_output_tokens, args.repeats, args.serve, args.vllm_python,
            args.threads) == (8, 32, 2, True, "/p", 1)


@pytest.mark.parametrize("argv, message", [
    (["--num", "0"], "--num: must be >= 1, got 0"),
    (["--repeats", "0"], "--repeats: must be >= 1"),
    (["--threads", "999"], "--threads: 999 is more than"),
    (["--kv-cache-gb", "0"], "--kv-cache-gb: must be > 0"),
])
def test_bad_options_are_refused_by_name(argv, message, capsys):
    with pytest.raises(SystemExit):
        vs_vllm.parse_args(argv)
    assert message in capsys.readouterr().err


def test_vllm_binds_as_many_cores_as_agentix_has_threads_and_reserves_none():
    assert vs_vllm.vllm_env(_setup(threads=2), {3, 1, 2}) == {
        "VLLM_CPU_OMP_THREADS_BIND": "1,2", "VLLM_CPU_NUM_OF_RESERVED_CPU": "0"}
    assert vs_vllm.vllm_env(_setup(device="cuda"), {0, 1}) == {}


def test_the_served_agentix_engine_is_the_offline_one():
    from engine import EngineConfig
    from server.cli import build_parser
    from server.cli_checks import engine_config

    setup = _setup()
    args = build_parser().parse_args(["serve", *vs_vllm.agentix_serve_args(setup)])
    offline = EngineConfig.from_flat(model="/model", **{**PLAIN, **vs_vllm.agentix_config(setup)})
    assert engine_config(args, "/model") == offline
    assert args.served_model_name == vs_vllm.SERVED_NAME


def test_identical_outputs_are_counted_request_by_request():
    assert vs_vllm.identical_count([[1, 2], [3, 4], [5]], [[1, 2], [3, 9], [5]]) == 2
    with pytest.raises(ValueError, match="2 outputs against 1"):
        vs_vllm.identical_count([[1], [2]], [[1]])


def test_a_ratio_per_repeat_that_ran_both():
    repeats = [{"agentix": {"tokens_per_s": 100.0}, "vllm": {"tokens_per_s": 125.0}},
               {"agentix": {"tokens_per_s": 90.0}}]
    assert vs_vllm.ratios(repeats) == [pytest.approx(0.8)]


def test_the_table_shows_throughput_first_token_memory_and_preemptions():
    run = dict(tokens=60, seconds=2.0, tokens_per_s=30.0, first_token_s=[0.1, 0.3, 0.2],
               peak_tree_rss_mb=812.4, peak_tree_pss_mb=700.6, preemptions=0)
    row = vs_vllm.table(1, {"vllm": run}).splitlines()[-1]
    assert row == "| 1 | vllm | 60 | 2.0 | 30.0 | 0.20 | 0.20 | 0.30 | 812 | 701 | 0 |"


@pytest.fixture
def scripted(monkeypatch):
    """The study with its requests and runs scripted; returns the engines in run order."""
    import bench.sim.sharegpt as sharegpt
    import engine.models.smollm2 as smollm2
    import transformers

    order = []

    def run(engine, setup, requests):
        order.append(engine)
        speed = 100.0 if engine == "agentix" else 80.0 + 20.0 * (len(order) > 2)
        ids = [[1, 2], [3, 4]] if engine == "agentix" else [[1, 2], [3, 5]]
        return dict(tokens=4, seconds=1.0, tokens_per_s=speed, first_token_s=[0.1, 0.2],
                    token_ids=ids, peak_tree_rss_mb=10.0, peak_tree_pss_mb=9.0)

    monkeypatch.setattr(vs_vllm, "offline", run)
    monkeypatch.setattr(vs_vllm, "served", run)
    monkeypatch.setattr(vs_vllm, "_find_vllm",
                        lambda args, cuda: args.vllm_python and (args.vllm_python, "0.32.0"))
    monkeypatch.setattr(smollm2, "ensure_smollm2_dir", lambda: "/nowhere")
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda path: None)
    monkeypatch.setattr(sharegpt, "sample_requests", lambda *a: [([7], 2), ([8], 2)])
    monkeypatch.setattr(sharegpt, "describe", lambda requests: "two requests")
    return order


def test_repeats_alternate_and_summarise_the_ratio_and_agreement(scripted, capsys):
    vs_vllm.main(["--repeats", "2", "--vllm-python", "/v/python", "--device", "cpu"])
    assert scripted == ["agentix", "vllm", "vllm", "agentix"]
    out = capsys.readouterr().out
    assert "per repeat: 1.25x, 1.00x: min 1.00x / median 1.12x / max 1.25x" in out
    assert "identical greedy token ids: 1 of 2 requests" in out


def test_served_runs_report_no_agreement(scripted, capsys):
    vs_vllm.main(["--repeats", "1", "--serve", "--vllm-python", "/v/python", "--device", "cpu"])
    out = capsys.readouterr().out
    assert "served;" in out and "per repeat: 1.25x" in out and "identical" not in out


def test_without_vllm_agentix_runs_alone(scripted, capsys):
    vs_vllm.main(["--repeats", "2", "--device", "cpu"])
    assert scripted == ["agentix", "agentix"]
    assert "agentix / vllm" not in capsys.readouterr().out


def test_record_writes_the_ratios_speeds_and_agreement_as_a_report_record(scripted, tmp_path,
                                                                         monkeypatch):
    monkeypatch.setattr(vs_vllm, "REPO_ROOT", tmp_path)
    monkeypatch.setattr(vs_vllm, "current_commit", lambda root: "c0ffee0")
    argv = ["--repeats", "2", "--vllm-python", "/v/python", "--device", "cpu", "--record", "vs_x"]
    vs_vllm.main(argv)
    study = load_studies(tmp_path / "bench/results/report")[0]
    assert (study.name, study.commit) == ("vs_x", "c0ffee0")
    assert study.command == ".venv/bin/python -m bench.studies.vs_vllm " + " ".join(argv)
    assert study.title == "Agentix vs vLLM, offline (issue 40)"
    assert "both engines 2 threads, 2.5 GiB of KV, prefix caching off" in study.machine
    rows = {row.key: row for row in study.rows}
    assert rows["ratio.median"].value == 1.125
    assert rows["ratio.median"].note == "min 1.00x / max 1.25x; the issue's 1.2x is missed"
    assert [rows[f"ratio.repeat{i}"].value for i in (0, 1)] == [1.25, 1.0]
    assert [rows[f"tokens_per_s.vllm.repeat{i}"].value for i in (0, 1)] == [80.0, 100.0]
    assert rows["tokens_per_s.vllm.repeat0"].figure == "vLLM 0.32.0 output tokens/s, repeat 0"
    assert rows["ttft_p50.agentix.median"].value == 0.15
    assert rows["peak_rss_mb.vllm.median"].value == 10
    assert rows["identical_greedy"].value == 1
    assert rows["ratio.median"].workload == (
        "sharegpt-2 offline (seed 0, 4 output tokens, all at once), SmolLM2-135M float32")


def test_a_served_record_has_no_agreement_row(scripted, tmp_path, monkeypatch):
    monkeypatch.setattr(vs_vllm, "REPO_ROOT", tmp_path)
    vs_vllm.main(["--repeats", "1", "--serve", "--vllm-python", "/v/python", "--device", "cpu",
                  "--record", "vs_y"])
    study = load_studies(tmp_path / "bench/results/report")[0]
    assert study.title == "Agentix vs vLLM, through each engine's OpenAI door (issue 40)"
    assert "identical_greedy" not in {row.key for row in study.rows}
    assert study.rows[0].note == "min 1.25x / max 1.25x; the issue's 1.2x is met"


def test_record_needs_vllm_and_a_plain_name(scripted, capsys):
    with pytest.raises(SystemExit, match="--record vs_z needs vLLM"):
        vs_vllm.main(["--repeats", "1", "--device", "cpu", "--record", "vs_z"])
    assert scripted == []
    with pytest.raises(SystemExit):
        vs_vllm.parse_args(["--record", "Bad-Name"])
    assert "--record: expected [a-z0-9_]+, got 'Bad-Name'" in capsys.readouterr().err
