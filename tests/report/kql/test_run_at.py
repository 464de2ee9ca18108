"""``Engine.run_at``: a query at many moments planned once (report/kql/moments.py) gives, at each
moment, the rows ``run`` gives there. Held on the churning fleet (VMs deleted, evicted, late,
upgraded) for every alert rule, at moments where the rule raises and where it does not, and on a
query the rewrite cannot see through (run per moment)."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from helpers import platformtruth as pt
from helpers.fleetrun import moments as evaluations
from helpers.fleetrun import rules, workbook, workbook_at
from helpers.once import once_value

from se_forwarder.report import Engine
from se_forwarder.report.kql import moments
from se_forwarder.report.kql.params import UnknownParameter
from se_forwarder_testbed.fleet import generate


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    """The churning fleet with Azure's own record (the collector's rows) beside the agents'."""
    fleet = once_value(tmp_path_factory, "platform-fleet", lambda _: generate(pt.SPEC))
    with Engine(fleet.records, fleet.heartbeats, platform=fleet.platform) as e:
        yield e


def _every(engine: Engine, step: timedelta) -> list[datetime]:
    t, out = engine.oldest() + step, []
    while t <= engine.now:
        out.append(t)
        t += step
    return out


def _same(rows: list[dict]) -> list[str]:
    return sorted(map(repr, rows))


@pytest.mark.parametrize("key", sorted(rules()))
def test_each_moment_has_the_rows_a_run_at_that_moment_has(engine, key):
    """Every evaluation of the rule over the 8 hours where this fleet (its seed) has an incident
    of each rule, beside ``run`` at some where it raises and some where it does not."""
    rule = rules()[key]
    start = engine.oldest() + timedelta(days=2, hours=16)
    at = evaluations(rule, start, start + timedelta(hours=8))
    scan = engine.run_at(rule.query, at, timespan=rule.query_range)
    assert list(scan) == at
    busy = [m for m, rows in scan.items() if rows]
    idle = [m for m, rows in scan.items() if not rows]
    assert busy, f"{key} raises nothing here: the comparison would be of empty results"
    picked = busy[:: max(1, len(busy) // 4)][:4] + idle[:: max(1, len(idle) // 2)][:2]
    for m in picked:
        assert _same(scan[m]) == _same(engine.run(rule.query, now=m, timespan=rule.query_range)), m
    again = engine.run_at(rule.query, picked, timespan=rule.query_range)  # another grouping
    assert {m: _same(r) for m, r in again.items()} == {m: _same(scan[m]) for m in picked}


def test_a_summary_is_one_row_at_every_moment_even_of_no_rows(engine):
    """KQL's ``summarize`` without ``by`` is one row over no rows too: so at each moment."""
    query = "ScheduledEventsAgent_CL | summarize n = count(), latest = max(TimeGenerated)"
    at = [engine.oldest() - timedelta(days=1), *_every(engine, timedelta(hours=12))]
    got = engine.run_at(query, at, timespan=timedelta(hours=1))
    assert got[at[0]] == [{"n": 0, "latest": None}]
    for m in at:
        assert got[m] == engine.run(query, now=m, timespan=timedelta(hours=1)), m
        assert len(got[m]) == 1 and (got[m][0]["latest"] is None or got[m][0]["latest"] <= m)


def test_sql_that_reads_a_table_where_the_rewrite_cannot_see_is_not_rewritten(engine):
    sql, _ = engine.sql("ScheduledEventsAgent_CL | take 1")
    assert moments.lateral(sql, ("kqlnow",), None) is not None
    hidden = sql.replace('FROM "ScheduledEventsAgent_CL"', 'FROM /**/ "ScheduledEventsAgent_CL"')
    assert hidden != sql and moments.lateral(hidden, ("kqlnow",), None) is None


def test_a_workbook_query_is_substituted_at_each_moment(engine):
    """With its workbook's parameters declared, a query with placeholders is planned at many
    moments too (the parameters substituted at each, the values given kept): each moment has
    the rows ``run`` gives there with the same values."""
    at = _every(engine, timedelta(days=1))
    path, values = "scheduled-events/services-upcoming.kql", {"ServiceTag": "team"}
    got = workbook_at(engine, path, at, values)
    assert sorted(got) == at and any(got.values())
    for m in at:
        assert _same(got[m]) == _same(workbook(engine, path, values, now=m)), m


def test_a_query_with_placeholders_is_refused(engine):
    with pytest.raises(UnknownParameter):
        engine.run_at("ScheduledEvents_CL | where VmName == '{Vm}'", [engine.now])
