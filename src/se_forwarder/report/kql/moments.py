"""One query at many moments, planned once: a lateral join over a table of moments.

An alert is checked at evaluation after evaluation (every 5 minutes over a day: 288 runs of the
same query), and on a small fleet planning the query is most of each run: DuckDB binds its 30-160
kB of SQL again every time (DuckDB 2 re-plans prepared statements too). Written as
``SELECT ... FROM moments, LATERAL (<the query>)``, with the clock (duckdb-kql's bound ``now``)
and the tables' views (the rows visible at a moment, ``Engine._show``) read from the moment's
row, DuckDB binds it once and decorrelates it into one plan for all of them.

Only a query whose SQL reads the engine's tables where this module can see it (after ``FROM`` or
``JOIN``) is rewritten; ``lateral`` returns None for any other (the engine runs it per moment).
"""

from __future__ import annotations

import re
from datetime import timedelta

from . import shims, tables

#: the table of moments the lateral join reads (a temporary table of the engine's connection)
TABLE = "se_moments"
#: the column of each result row that says which moment (its index in the table) it belongs to
INDEX = "se_moment"


def lateral(sql: str, clock: tuple[str, ...], timespan: timedelta | None) -> str | None:
    """``sql`` run at every moment of ``TABLE``: its rows, each with ``INDEX``; None when its
    tables cannot all be seen to be limited to the moment."""
    out = sql
    for name in clock:
        out = re.sub(rf"\${re.escape(name)}\b", f"{TABLE}.t", out)
    for table in tables.TABLES:
        quoted = f'"{table}"'
        visible = _visible(table, timespan).replace("\\", "\\\\")
        out = re.sub(rf"\b(FROM|JOIN)\s+{re.escape(quoted)}", rf"\1 {visible}", out)
        if quoted in out:  # read where this rewrite cannot see: not limited to the moment
            return None
    return f'SELECT {TABLE}.i AS "{INDEX}", q.* FROM {TABLE}, LATERAL ({out}) AS q'


def _visible(table: str, timespan: timedelta | None) -> str:
    """The rows of ``table`` a query at the moment sees, as ``Engine._show``'s view has them."""
    since = (
        ""
        if timespan is None
        else f' AND "TimeGenerated" >= {TABLE}.t - INTERVAL {_micros(timespan)} MICROSECONDS'
        f' AND "TimeGenerated" <= {TABLE}.t'
    )
    return (
        f'(SELECT * FROM "{tables.base_name(table)}" '
        f'WHERE "{shims.INGESTION_COLUMN}" <= {TABLE}.t{since})'
    )


def _micros(span: timedelta) -> int:
    return (span.days * 86_400 + span.seconds) * 1_000_000 + span.microseconds
