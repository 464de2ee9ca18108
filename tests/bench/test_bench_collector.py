"""Smoke test of the collector's memory bench of issue 33 in its ``--quick`` mode: its peak RSS
under hostile messages beside its normal figure (its latency with many partitions:
test_bench_collector_partitions.py). The figures are only checked to be there and whole: a
broken script fails here, a slow machine does not."""

from __future__ import annotations

import pytest
from helpers.benchrun import row, run_bench

pytestmark = [pytest.mark.e2e, pytest.mark.bench]


@pytest.mark.timeout(600)
def test_collector_memory_quick() -> None:
    out = run_bench("collector_memory.py", timeout=580)
    for name in ("normal", "20,000 names", "nested arrays", "1 MB Description", "all three"):
        peak_mb, _vs, secs, _cpu = row(out, name)
        assert 5 < float(peak_mb) < 2000 and float(secs) > 0, out
