"""The report engine's arg_max / arg_min rewrite (``report.argmax``): the same rows as
duckdb-kql's own SQL, on data with null arguments, null ordering values and ties, and only
items of duckdb-kql's exact shape touched."""

from __future__ import annotations

import random

import duckdb
import duckdb_kql
import pytest

from se_forwarder.report import argmax

COLUMNS = ["RecordId", "VmId", "TimeGenerated", "Seen", "Note", "Count", "List"]

QUERIES = [
    "T | summarize arg_max(TimeGenerated, *) by RecordId",
    "T | summarize arg_min(TimeGenerated, *) by VmId",
    "T | summarize arg_max(Seen, Note, Count, List), n = count(), m = min(TimeGenerated) by VmId",
    "T | summarize arg_max(TimeGenerated, Note), arg_max(Seen, Count) by VmId, RecordId",
    ("T | where Note != 'x' | summarize arg_max(TimeGenerated, *) by RecordId "
     "| summarize arg_max(Seen, Note, List) by VmId"),
]


@pytest.fixture(scope="module")
def con() -> duckdb.DuckDBPyConnection:
    """Duplicated RecordIds (at-least-once delivery), ties on the ordering value, nulls in every
    column but the keys, groups whose ordering value is null throughout."""
    rng = random.Random(20)
    rows = []
    for n in range(4000):
        record = f"r{n % 900}"
        seen = None if n % 9 == 0 else rng.randint(0, 4)
        rows.append((record, f"vm{n % 37}", rng.randint(0, 3) if n % 5 else None, seen,
                     rng.choice([None, "a", "b", "it's"]), rng.choice([None, 1, 2, 3]),
                     rng.choice([None, "[]", '[1,2]', '{"k":"v"}'])))
    c = duckdb.connect()
    c.execute("CREATE TABLE T (RecordId VARCHAR, VmId VARCHAR, TimeGenerated INTEGER, "
              "Seen INTEGER, Note VARCHAR, Count BIGINT, List JSON)")
    c.executemany("INSERT INTO T VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
    return c


@pytest.mark.parametrize("query", QUERIES)
@pytest.mark.parametrize("threads", [1, 2])
def test_same_rows_as_duckdb_kqls_form(con: duckdb.DuckDBPyConnection, query: str,
                                       threads: int) -> None:
    con.execute(f"SET threads = {threads}")
    sql = str(duckdb_kql.to_sql(query, schema={"T": COLUMNS}))
    fast = argmax.fast(sql)
    assert "any_value({'v': " in sql and "any_value({'v': " not in fast
    assert "_null(" in fast
    rel, new = con.sql(sql), con.sql(fast)
    assert new.columns == rel.columns and new.types == rel.types
    assert sorted(map(repr, new.fetchall())) == sorted(map(repr, rel.fetchall()))


def test_only_that_shape_is_rewritten() -> None:
    item = "COALESCE(arg_max({'v': \"A\"}, \"T\"), any_value({'v': \"A\"}))['v']"
    quoted = "'" + item.replace("'", "''") + "'"
    other = "COALESCE(arg_max({'v': \"A\"}, \"T\"), any_value({'v': \"B\"}))['v']"
    assert argmax.fast(f"SELECT {quoted} AS x") == f"SELECT {quoted} AS x"
    assert argmax.fast(f"SELECT {other} AS x") == f"SELECT {other} AS x"
    assert argmax.fast(f"SELECT {item} AS a, {quoted} AS q") == (
        "SELECT CASE WHEN max(\"T\") IS NULL THEN first(\"A\") "
        f"ELSE arg_max_null(\"A\", \"T\") END AS a, {quoted} AS q")
