"""Smoke test of bench/collector_partitions.py in its ``--quick`` mode (issue 33): the collector's
latency with many partitions beside two, beside the stand-in's floor and with a hostile message
before each notification. A module of its own, apart from collector_memory's, so
``--dist loadfile`` runs the two on two workers at once. The figures are only checked to be
there and whole (every notification arrived): a broken script fails here, a slow machine does
not."""

from __future__ import annotations

import pytest
from helpers.benchrun import row, run_bench

pytestmark = [pytest.mark.e2e, pytest.mark.bench]


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
