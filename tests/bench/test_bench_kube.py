"""Smoke test of bench/kube_cost.py: the DaemonSet's agent beside the plain agent, idle and
during a drain, in its ``--quick`` mode."""

from __future__ import annotations

import pytest
from helpers.benchrun import row, run_bench

pytestmark = [pytest.mark.e2e, pytest.mark.bench]


@pytest.mark.timeout(180)
def test_kube_cost_quick() -> None:
    out = run_bench("kube_cost.py")
    assert "idle CPU ms/s" in out and "peak RSS MB" in out and "load average" in out
    for name in ("agent ", "daemonset "):
        idle_cpu, idle_rss, drain_cpu, drain_rss, peak, *_ = row(out, name)
        assert 0 < float(idle_cpu) < 1000, out
        assert 5 < float(idle_rss) <= float(peak) < 1000, out
        assert 5 < float(drain_rss) <= float(peak), out
        assert float(drain_cpu) > 0, out
    assert "NodeCordoned NodeDrained Approved NodeUncordoned" in out, out
    assert "[PASS] the drain completed" in out, out
