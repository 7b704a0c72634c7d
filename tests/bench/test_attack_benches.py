"""The attack benchmarks run end to end at a tiny scale against this repository's server
(the tiny model): their refusal counts and victim figures are what the hardening implies."""

from __future__ import annotations

from bench.studies.hardening import memory_flood, stall


def test_memory_flood_counts_refusals(tiny_llama_dir, capsys):
    report = memory_flood.main(["--model", tiny_llama_dir, "--programs", "4", "--cycles", "1",
                                "--cycle-programs", "3", "--http-programs", "3",
                                "--http-bodies", "2", "--settle", "0", "--json"])
    program, tenant = report["floods"]["program_flood"], report["floods"]["tenant_flood"]
    assert (program["accepted"], program["refused"]) == (0, {"INVALID_ARGUMENT": 4})
    assert (tenant["starts"]["accepted"], tenant["starts"]["refused"]) == (
        0, {"INVALID_ARGUMENT": 3})
    ids, bodies = report["floods"]["http_program_ids"], report["floods"]["http_refused_bodies"]
    assert (ids["accepted"], ids["refused"]) == (3, {})
    assert (bodies["accepted"], bodies["refused"]) == (0, {"400": 2})
    assert '"program_flood"' in capsys.readouterr().out


def test_stall_measures_a_victim_under_stop_lists_and_huge_http_bodies(tiny_llama_dir):
    report = stall.main(["--model", tiny_llama_dir, "--seconds", "1", "--attackers", "1",
                         "--phases", "alone,stop_list,http_huge_body", "--json"])
    phases = report["phases"]
    assert phases["alone"]["victim_tokens_per_s"] > 0
    assert phases["alone"]["victim_gap_max_ms"] >= phases["alone"]["victim_gap_p99_ms"] > 0
    assert phases["stop_list"]["variant"] == "16x256"  # 200,000 strings are refused
    assert phases["stop_list"]["attack"]["accepted"] >= 1
    huge = phases["http_huge_body"]["attack"]
    assert huge["accepted"] == 0 and set(huge["refused"]) == {"413"} and huge["failed"] == {}
    assert all(isinstance(p["gap_ok"], bool) for p in phases.values())
