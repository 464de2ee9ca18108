"""duckdb-kql's SQL narrowed where the engine knows a value is text (report/kql/narrow.py): the
same rows as duckdb-kql's own SQL, on real DuckDB; a name that is not text inside the query (a
column shadowed by ``extend``, a dynamic value) falls back to duckdb-kql's SQL with its answer,
once; the fleet's definitions lose most of their SQL."""

from __future__ import annotations

from datetime import timedelta

import duckdb_kql
import pytest

from se_forwarder.report import Engine
from se_forwarder.report.kql import narrow

NOW = "2026-03-01T12:00:00Z"
BEATS = [
    {
        "TimeGenerated": f"2026-03-01T{h:02d}:00:00.000Z",
        "RecordId": f"h-{v}-{h}",
        "VmId": f"vm-{v}" if v else "",
        "VmName": f"Name-{v}",
        "ResourceGroup": "RG-1",
        "SubscriptionId": "Sub",
        "Reason": "periodic",
        "Polls": h,
    }
    for v in range(3)
    for h in range(8, 12)
]

#: the generic tostring in each of its disguises, on text columns and literals
TEXT_QUERIES = [
    'ScheduledEventsAgent_CL | extend Key = tolower(strcat(SubscriptionId, "/", ResourceGroup,'
    ' "/", VmName)) | project RecordId, Key',
    "ScheduledEventsAgent_CL | where isnotempty(VmId)"
    " | summarize n = count() by Id = tostring(VmId)",
    'ScheduledEventsAgent_CL | where isempty(VmId) | project RecordId, Who = strcat("vm ", VmName)',
    "ScheduledEventsAgent_CL | summarize n = count() by Name = tolower(VmName), Reason",
]

#: names a query makes something else than the table's text
SHADOWED = [
    (
        "ScheduledEventsAgent_CL | extend VmName = TimeGenerated | where RecordId == 'h-1-9'"
        ' | project x = tostring(VmName), y = strcat(VmName, "/", Reason)',
        [{"x": "2026-03-01T09:00:00.0000000Z", "y": "2026-03-01T09:00:00.0000000Z/periodic"}],
    ),
    (
        "ScheduledEventsAgent_CL | extend Reason = Polls > 8 | where RecordId == 'h-1-9'"
        " | project r = tostring(Reason)",
        [{"r": "True"}],
    ),
    (
        'ScheduledEventsAgent_CL | extend Reason = dynamic({"a": 1}) | where RecordId == "h-1-9"'
        " | project r = tostring(Reason)",
        [{"r": '{"a":1}'}],
    ),
]


def _as_translated(engine: Engine, query: str) -> list[str]:
    """The rows of duckdb-kql's own SQL for ``query`` on the engine's tables, at its moment."""
    engine.run("print 1")  # the views show the engine's moment
    sql = duckdb_kql.to_sql(query, query_now=engine.now)
    return sorted(map(repr, engine.con.execute(str(sql), dict(sql.parameters)).fetchall()))


@pytest.mark.parametrize("query", TEXT_QUERIES)
def test_narrowed_sql_gives_duckdb_kqls_rows(query: str) -> None:
    with Engine([], BEATS, now=NOW) as engine:
        sql, _ = engine.sql(query)
        wide, _ = engine.sql(query, narrowed=False)
        assert "list_transform" in wide and len(sql) < len(wide) / 2
        rows = engine.run(query)
        assert rows and engine.widened == 0
        assert sorted(repr(tuple(r.values())) for r in rows) == _as_translated(engine, query)


@pytest.mark.parametrize(("query", "want"), SHADOWED)
def test_a_name_that_is_not_text_in_the_query_gets_duckdb_kqls_answer(query, want) -> None:
    with Engine([], BEATS, now=NOW) as engine:
        assert engine.run(query) == want
        assert engine.widened == 1
        assert engine.run(query) == want  # as translated from then on, not guessed again
        assert engine.widened == 1


def test_a_shared_let_that_is_not_text_falls_back_too() -> None:
    let = "let odd = ScheduledEventsAgent_CL | extend VmName = Polls | summarize by VmName;\n"
    queries = [let + 'odd | project Name = strcat("n", VmName)', let + "odd | count"]
    with Engine([], BEATS, now=NOW) as engine:
        engine.share((q, None, None, timedelta(days=1)) for q in queries)
        names = engine.run(queries[0], timespan=timedelta(days=1))
        assert sorted(r["Name"] for r in names) == ["n10", "n11", "n8", "n9"]
        assert engine.run(queries[1], timespan=timedelta(days=1)) == [{"Count": 4}]


def test_the_fleet_definitions_lose_most_of_their_sql() -> None:
    """The alert with the most definitions: most of its generic tostrings narrowed (the
    installed duckdb-kql still writes the shape narrow knows)."""
    from helpers.fleetrun import rules

    query = rules()["service-concurrency-risk"].query
    with Engine([], [], now=NOW) as engine:
        sql, _ = engine.sql(query)
        wide, _ = engine.sql(query, narrowed=False)
    assert len(sql) < 0.6 * len(wide)
    assert sql.count("list_transform") < wide.count("list_transform") / 4
    assert narrow.GUARD in sql
