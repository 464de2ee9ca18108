"""The engine itself (se_forwarder.report): Log Analytics' visibility rules, the portal's parameter
substitution, the shims for what duckdb-kql lacks; and the DCR transformations executed."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from helpers.infra.paths import QUERIES
from helpers.tinyfleet import NOW, iso

from se_forwarder.report import Engine, TimeRange, UnknownParameter, substitute
from se_forwarder.report.kql.shims import rewrite

MIN = timedelta(minutes=1)


def _record(rid: str, at: datetime, ingested: datetime | None = None, **over) -> dict:
    row = {
        "TimeGenerated": iso(at),
        "RecordId": rid,
        "Phase": "FirstSeen",
        "EventId": "E",
        "Resources": ["a", "b"],
        "AffectsThisVm": True,
        "VmName": None,
    }
    if ingested is not None:
        row["_IngestionTime"] = iso(ingested)
    return {**row, **over}


def test_rows_exist_from_their_ingestion_time_and_now_is_the_evaluation_moment():
    e = Engine(
        [
            _record("r1", NOW - 10 * MIN, NOW - 9 * MIN),
            _record("r1", NOW - 10 * MIN, NOW + 2 * MIN),
        ],
        [],
        now=NOW,
    )
    q = "ScheduledEvents_CL | summarize n = count(), f0 = min(ingestion_time()), t = max(now())"
    assert e.run(q) == [{"n": 1, "f0": NOW - 9 * MIN, "t": NOW}]
    assert e.run(q, now=NOW + 3 * MIN)[0]["n"] == 2
    assert e.run(
        "ScheduledEvents_CL | where ingestion_time() > ago(5m) | count", now=NOW + 3 * MIN
    ) == [{"Count": 1}]


def test_the_query_time_range_limits_every_table():
    e = Engine(
        [_record("old", NOW - 3 * 60 * MIN), _record("new", NOW - MIN)],
        [{"TimeGenerated": iso(NOW - 2 * 60 * MIN), "RecordId": "h", "Reason": "start"}],
        now=NOW,
    )
    q = "union ScheduledEvents_CL, ScheduledEventsAgent_CL | summarize make_set(RecordId)"
    assert sorted(e.run(q, timespan=timedelta(hours=2))[0]["set_RecordId"]) == ["h", "new"]
    assert sorted(e.run(q)[0]["set_RecordId"]) == ["h", "new", "old"]


def test_columns_have_the_contract_types_and_strings_are_never_null():
    e = Engine([_record("r", NOW - MIN)], [], now=NOW)
    row = e.run(
        "ScheduledEvents_CL | project Resources, AffectsThisVm, VmName, Outcome, TimeGenerated"
    )[0]
    assert row == {
        "Resources": ["a", "b"],
        "AffectsThisVm": True,
        "VmName": "",
        "Outcome": "",
        "TimeGenerated": NOW - MIN,
    }
    assert e.run("ScheduledEvents_CL | where isempty(VmName) | count") == [{"Count": 1}]


def test_shims_rewrite_calls_but_not_strings_or_comments():
    text = (
        'T | where x == "maxif(a, b)" // make_set_if(q, r)\n'
        '| summarize s = make_set_if(Name, Flag and f(1, 2), 10), m = maxif(T, P == "x,y")\n'
        '| where Id == ```a"b``` and I = ingestion_time()'
    )
    assert rewrite(text) == (
        'T | where x == "maxif(a, b)" // make_set_if(q, r)\n'
        "| summarize s = make_set(iif(Flag and f(1, 2), Name, dynamic(null)), 10), "
        'm = max(iif(P == "x,y", T, dynamic(null)))\n'
        '| where Id == @"a""b" and I = _IngestionTime'
    )


PARAMS = {
    "Zone": {
        "name": "Zone",
        "type": 2,
        "multiSelect": True,
        "quote": "'",
        "delimiter": ",",
        "typeSettings": {"selectAllValue": "*"},
        "value": ["value::all"],
    },
    "TimeRange": {"name": "TimeRange", "type": 4, "value": {"durationMs": 86_400_000}},
    "EventId": {"name": "EventId", "type": 1, "value": ""},
}


def test_parameters_are_substituted_as_the_portal_does():
    text = (
        "T | where '*' in ({Zone}) or Zone in ({Zone}) | where X {TimeRange} | where E == "
        "'{EventId}' "
        "| summarize by bin(TimeGenerated, {TimeRange:grain})"
    )
    assert substitute(text, PARAMS) == (
        "T | where '*' in ('*') or Zone in ('*') | where X > ago(1d) | where E == '' "
        "| summarize by bin(TimeGenerated, 15m)"
    )
    got = substitute(
        text,
        PARAMS,
        {
            "Zone": ["1", "3"],
            "EventId": "E1",
            "TimeRange": TimeRange(timedelta(days=7), timedelta(hours=1)),
        },
    )
    assert got == (
        "T | where '*' in ('1','3') or Zone in ('1','3') | where X > ago(7d) | where E == 'E1' "
        "| summarize by bin(TimeGenerated, 1h)"
    )
    assert substitute("{TimeRange:start}", PARAMS, now=NOW) == "datetime(2026-05-03T12:00:00Z)"
    with pytest.raises(UnknownParameter):
        substitute("{Nope}", PARAMS)


def test_a_query_with_placeholders_needs_the_workbook_parameters():
    e = Engine([], [], now=NOW)
    with pytest.raises(UnknownParameter):
        e.run("ScheduledEvents_CL | where Zone in ({Zone})")


@pytest.mark.parametrize(
    "path", ["transforms/records.kql", "transforms/heartbeats.kql", "transforms/platform.kql"]
)
def test_dcr_transformations(path):
    """Each row passes unchanged; a row without TimeGenerated gets the ingestion moment."""
    key = path.removeprefix("transforms/").removesuffix(".kql")
    table = {
        "records": "ScheduledEvents_CL",
        "heartbeats": "ScheduledEventsAgent_CL",
        "platform": "ScheduledEventsPlatform_CL",
    }[key]
    rows = [
        _record("r1", NOW - MIN),
        {**_record("r2", NOW - MIN), "TimeGenerated": None, "_IngestionTime": iso(NOW - MIN)},
    ]
    given = {"records": [], "heartbeats": [], "platform": []}
    given[key] = rows
    e = Engine(given["records"], given["heartbeats"], platform=given["platform"], now=NOW)
    text = f"let source = {table};\n" + (QUERIES / path).read_text("utf-8")
    got = {r["RecordId"]: r["TimeGenerated"] for r in e.run(text)}
    assert got == {"r1": NOW - MIN, "r2": NOW}
