"""Planned runs, one after another or several at once in worker processes
(bench/analysis/parallel_runs.py): the same results in planned order, results done before
taken as they are, a failing job's error raised, `jobs` bounded."""

import argparse
import math
import operator

import pytest

from bench.analysis.parallel_runs import MAX_JOBS, check_jobs, parse_jobs, run_all

PLANNED = [(None, (operator.pow, (2, 10))), ("kept", None), (None, (math.factorial, (5,)))]


@pytest.mark.parametrize("jobs", [1, 2])
def test_results_in_planned_order_whatever_the_jobs(jobs):
    seen = []
    assert run_all(iter(PLANNED), jobs, seen.append) == [1024, "kept", 120]
    assert sorted(map(str, seen)) == ["1024", "120", "kept"]


def test_one_job_at_a_time_reports_in_order():
    seen = []
    run_all(iter(PLANNED), 1, seen.append)
    assert seen == [1024, "kept", 120]


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_failing_job_raises_its_error(jobs):
    planned = [(None, (math.sqrt, (4.0,))), (None, (math.sqrt, (-1.0,)))]
    with pytest.raises(ValueError, match="math domain error"):
        run_all(planned, jobs)


def test_a_planned_run_needs_a_result_or_a_job():
    with pytest.raises(ValueError, match="neither a result nor a job"):
        run_all([(None, None)], 1)


@pytest.mark.parametrize("jobs", [0, -1, MAX_JOBS + 1])
def test_jobs_out_of_bounds_are_refused_by_name(jobs):
    with pytest.raises(ValueError, match=rf"jobs: must be in \[1, {MAX_JOBS}\], got {jobs}"):
        check_jobs(jobs)
    with pytest.raises(ValueError, match="jobs"):
        run_all(iter(PLANNED), jobs)
    with pytest.raises(argparse.ArgumentTypeError, match="jobs"):
        parse_jobs(str(jobs))
    assert parse_jobs("3") == 3
