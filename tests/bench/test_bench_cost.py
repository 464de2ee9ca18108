"""Smoke test of bench/cost_model.py: it runs the demo fleet (--quick), reads the rows the Logs
Ingestion stand-in received and prints bytes per VM-day per table and the monthly cost at 1k, 10k
and 100k VMs. Checked: every table measured, the figures there and consistent with the printed
formula (GB = VMs x 30 x bytes per VM-day / 10^9), not any particular price."""

from __future__ import annotations

import re

import pytest
from helpers.benchrun import NUM, row, run_bench

pytestmark = [pytest.mark.e2e, pytest.mark.bench]


def _n(text: str) -> float:
    return float(text.replace(",", ""))


@pytest.mark.timeout(600)
def test_cost_model_quick() -> None:
    out = run_bench("cost_model.py", timeout=580)
    for table in ("ScheduledEventsAgent_CL", "ScheduledEvents_CL", "ScheduledEventsPlatform_CL"):
        rows, billed, wire = row(out, table)[:3]
        assert int(rows) > 0 and 100 < _n(billed) < _n(wire), out  # billed below the JSON size
    total = _n(re.search(rf"  total\s+({NUM}) B", out).group(1))
    parts = sum(
        _n(re.search(rf"  {k}\s+({NUM}) B", out).group(1))
        for k in ("heartbeats", "records", "platform")
    )
    assert abs(total - parts) <= 2, out
    for vms in ("1,000", "10,000", "100,000"):
        gb, ingestion, retention, usd = (_n(v) for v in row(out, f"{vms:>8}")[:4])
        assert gb == pytest.approx(_n(vms) * 30 * total / 1e9, rel=0.01, abs=0.1), out
        assert usd == pytest.approx(ingestion + retention, abs=0.02), out
    assert "heartbeat every 600 s" in out and "Basic plan" in out
