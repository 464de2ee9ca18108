"""The report's charts bin by the grain the portal picks for the time the rows cover within the
workbook's range (issue 28: 45 minutes of a demo drawn as two hourly bars); a fleet whose rows
cover the whole range keeps the range's own grain."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from helpers import tinyfleet as tf
from helpers.infra.paths import DASHBOARDS

from se_forwarder.report.workbooks import execute
from se_forwarder.report.workbooks import workbook as plan

pytestmark = pytest.mark.e2e


def _events_by_type() -> plan.Workbook:
    wb = plan.load(
        DASHBOARDS / "scheduled-events.workbook.json", DASHBOARDS / "queries" / "workbook"
    )
    for s in wb.sections:
        s.items = [i for i in s.items if i.name == "events-by-type"]
    wb.hidden = {k: i for k, i in wb.hidden.items() if k == "events-by-type"}
    return wb


def _fleet(minutes: int) -> tf.Tiny:
    """One event first seen every 5 minutes from ``minutes`` before ``tf.NOW``."""
    t = tf.Tiny()
    web = tf.vm("web-1")
    start = tf.NOW - timedelta(minutes=minutes)
    for k in range(0, minutes, 5):
        at = start + timedelta(minutes=k)
        e = tf.event(f"E-{k}", "Freeze", "Scheduled", ("web-1",), at + timedelta(minutes=15))
        t.poll(web, at, [e], incarnation=k + 1)
    return t


def test_45_minutes_of_rows_are_binned_by_the_minute_not_into_hourly_bars():
    e = _fleet(45).engine()
    wb = _events_by_type()
    assert execute.range_values(wb, e)["TimeRange"].grain == timedelta(minutes=1)
    rows = execute.run_workbook(wb, e, None)["events-by-type"].rows
    bins = {r["TimeGenerated"] for r in rows}
    assert len(bins) == 9 and sum(r["Events"] for r in rows) == 9


def test_rows_over_the_whole_range_keep_its_grain():
    t = _fleet(45)
    old = tf.vm("old-1")
    t.beat(old, tf.NOW - timedelta(days=20), uptime=60)
    e = t.engine()
    assert execute.range_values(_events_by_type(), e) == {}


def test_a_time_chart_draws_an_empty_bin_as_zero():
    """Lines drawn only through the bins that hold events cross where nothing happened."""
    from datetime import datetime

    from se_forwarder.report.render import charts

    t0 = datetime(2026, 5, 4, 11, 0)
    rows = [
        {"TimeGenerated": t0, "Phase": "FirstSeen", "Events": 1},
        {"TimeGenerated": t0 + timedelta(minutes=1), "Phase": "Started", "Events": 1},
        {"TimeGenerated": t0 + timedelta(minutes=5), "Phase": "FirstSeen", "Events": 2},
    ]
    settings = {"xAxis": "TimeGenerated", "yAxis": ["Events"], "group": "Phase"}
    svg = charts.svg("timechart", rows, settings)
    # each series a polyline over the 6 one-minute bins, not over the 3 that hold a row
    paths = re.findall(r'<path d="M ([^"]*)"[^>]*style="fill: none; stroke: #', svg)
    points = [len(re.findall(r"[ML] ", "M " + p)) for p in paths]
    assert sorted(points)[-2:] == [6, 6], points
