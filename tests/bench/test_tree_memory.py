"""bench.support.tree_memory: a process's descendants count in its peak, sampled from outside."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from bench.support.tree_memory import PeakTreeMemory, tree_memory_mb

# A child that starts a grandchild holding 64 MiB of written pages for a second.
GRANDCHILD = "import time; b = bytes(range(256)) * (1 << 18); time.sleep(1.0)"
CHILD = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {GRANDCHILD!r}])"


def test_a_grandchild_s_memory_counts_in_the_peak():
    proc = subprocess.Popen([sys.executable, "-c", CHILD])
    with PeakTreeMemory(proc.pid, interval=0.05, pss_every=2) as peak:
        proc.wait()
    assert peak.rss_mb >= 64 and peak.pss_mb >= 64
    assert peak.figures() == {"peak_tree_rss_mb": peak.rss_mb, "peak_tree_pss_mb": peak.pss_mb}


def test_a_process_gone_weighs_nothing():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    assert tree_memory_mb(proc.pid) == (0.0, 0.0)


def test_pss_is_read_only_when_asked():
    rss, pss = tree_memory_mb(os.getpid(), pss=False)
    assert rss > 0 and pss == 0.0
    assert tree_memory_mb(os.getpid())[1] > 0


def test_the_sampling_must_make_sense():
    with pytest.raises(ValueError, match="interval"):
        PeakTreeMemory(1, interval=0)
    with pytest.raises(ValueError, match="pss_every"):
        PeakTreeMemory(1, pss_every=0)
