"""Smoke tests of the collector's benches of issue 33 in their ``--quick`` mode: its peak RSS
under hostile messages beside its normal figure, and its latency with many partitions beside
two, beside the stand-in's floor and with a hostile message before each notification. The
figures are only checked to be there and whole (every row arrived): a broken script fails here,
a slow machine does not."""

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


@pytest.mark.timeout(600)
def test_collector_partitions_quick() -> None:
    out = run_bench("collector_partitions.py", timeout=580)
    for what, partitions in (
        ("floor", 12),
        ("collect", 2),
        ("collect", 12),
        ("collect, hostile", 12),
    ):
        values = row(out, f"{what:<17} {partitions:10d}")
        assert values[1:4] == ["20", "of", "20"], out  # every notification arrived
