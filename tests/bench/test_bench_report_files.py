"""Smoke tests of the benchmark scripts under ``bench/``: the report's loader, the queries' SQL,
the workbooks' rows and the fleet generator. Each runs in its ``--quick`` mode and prints its
table. Not timed tests: the figures are only checked to be there and plausible, so a broken
script fails here, a slow machine does not."""

from __future__ import annotations

import re

import pytest
from helpers.benchrun import NUM, row, run_bench

pytestmark = [pytest.mark.e2e, pytest.mark.bench]


def test_report_memory_quick() -> None:
    out = run_bench("report_memory.py", timeout=300)
    rows = re.findall(
        rf"^\s*({NUM})\s+({NUM})\s+(this tree|before \(\w+\))\s+({NUM})\s+({NUM})\s+"
        rf"({NUM})\s+({NUM})$",
        out,
        flags=re.MULTILINE,
    )
    assert [r[2].split()[0] for r in rows] == ["this", "before", "this", "before"], out
    assert all(20 < float(r[5].replace(",", "")) < 4096 for r in rows), out  # peak RSS, MB
    assert "rows lost" not in out


def test_query_sql_quick() -> None:
    out = run_bench("query_sql.py", timeout=300)
    assert "dashboards/ of main (before) and of this tree (after)" in out, out
    values = row(out, "agent-events.kql")  # SQL kB before, after; planning s before, after
    assert len(values) == 4 and all(re.fullmatch(NUM, v) for v in values), out
    assert float(values[1]) > 1 and 0 < float(values[3]) < 60, out
    assert re.search(
        rf"total over 4 queries in both: SQL {NUM} kB -> {NUM} kB, planning {NUM} s -> "
        rf"{NUM} s CPU",
        out,
    ), out


def test_query_sql_narrowing_quick() -> None:
    out = run_bench("query_sql.py", "--narrowing", timeout=300)
    assert "duckdb-kql's SQL as written (before) and narrowed (after)" in out, out
    before, after, _, _ = row(out, "agent-events.kql")
    assert float(after) < float(before) / 2, out  # its tostrings narrowed


def test_workbook_rows_quick() -> None:
    # an item of each workbook (every item's query is the report's tests' business)
    out = run_bench("workbook_rows.py", "--items", "fleet,range-tiles", timeout=300)
    kind, span, rows, limit, verdict = row(out, "agent-health/fleet")
    assert (kind, span, limit, verdict) == ("query", "7d", "10,000", "ok") and int(rows) > 0
    assert row(out, "scheduled-events/range-tiles")[-2:] == ["10,000", "ok"], out
    assert re.search(rf"largest result: {NUM} rows of 10,000", out)


def test_coarse_heartbeats_keep_the_recent_days_and_thin_the_rest() -> None:
    from datetime import timedelta

    from helpers.fleetview import ts

    from se_forwarder.timefmt import format_ms
    from se_forwarder_testbed.fleet import FleetSpec, generate

    fine, coarse = generate(FleetSpec(days=3)), generate(FleetSpec(days=3, fine_days=1))
    since = ts(format_ms(fine.truth.end)) - timedelta(hours=23)

    def recent(f) -> int:
        return sum(1 for r in f.heartbeats if ts(r["TimeGenerated"]) >= since)

    assert len(coarse.heartbeats) < 0.5 * len(fine.heartbeats)
    assert recent(coarse) > 0.95 * recent(fine)


def test_alert_moments_quick() -> None:
    """Two rules' evaluations one by one beside planned together: the same rows at every moment
    (the figures are read, not asserted)."""
    out = run_bench("alert_moments.py", timeout=300)
    assert re.search(rf"{NUM} evaluations every 5 min from ", out), out
    for name in ("agent-silent", "many-vms-hit"):
        one, together, _x, _rows, same = row(out, name)
        assert float(one) > 0 and float(together) > 0 and same == "yes", out
    assert row(out, "all")
