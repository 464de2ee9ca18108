"""Run the project's KQL (workbooks, alerts, library) over records and heartbeats, locally.

``Engine(records, heartbeats, now=...)`` loads the two Log Analytics tables into DuckDB and
``run(query, params)`` executes KQL on them through duckdb-kql, the way Log Analytics would:

* ``now()`` and ``ago()`` are the evaluation moment (``now``; alerts are evaluated at several);
* a row exists from its ingestion time on: rows ingested after ``now`` are not visible, and
  ``ingestion_time()`` returns each row's ingestion time (see ``shims``);
* the query's time range (a workbook item's time context, an alert's query time range) limits
  every table to ``TimeGenerated`` in ``[now - timespan, now]``, as the query API does;
* workbook ``{Param}`` placeholders are substituted as the portal does (``params``).

Needs the ``report`` extra (``pip install se-forwarder[report]``: duckdb-kql with DuckDB).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from .. import contract
from . import params as wbparams
from . import shims, tables

Row = dict[str, Any]

#: translated SQL by (query text, schema): the clock (``now()``, ``ago()``) is a bound value in
#: duckdb-kql's SQL, so one translation serves every moment and every engine over the same tables
#: (alerts are evaluated at hundreds of moments; translating is most of a query's cost on small
#: tables)
_TRANSLATED: dict[tuple, tuple[str, dict[str, Any], tuple[str, ...]]] = {}


class Engine:
    """The two tables loaded once; any number of queries, each at its own moment."""

    def __init__(self, records: Iterable[Mapping[str, Any]],
                 heartbeats: Iterable[Mapping[str, Any]], *, now: datetime | str,
                 platform: Iterable[Mapping[str, Any]] = ()) -> None:
        import duckdb_kql  # the report extra; imported here so the agent never needs it

        self._kql = duckdb_kql
        self.now = as_utc(now)
        self.con = duckdb_kql.connect()
        given = {contract.RECORDS: records, contract.HEARTBEATS: heartbeats,
                 contract.PLATFORM: platform}
        self.counts = {table: tables.load(self.con, table, given[key])
                       for table, key in tables.TABLES.items()}
        self._show(self.now, None)
        self._schema_key: tuple | None = None

    def load_table(self, name: str, schema: list[tuple[str, str]],
                   rows: Iterable[Mapping[str, Any]]) -> int:
        """Load another table (``schema``: (column, Kusto type)), e.g. Resource Graph's
        ``maintenanceresources`` from a file of its rows; queries see all of it, at any moment."""
        self.counts[name] = tables.load(self.con, name, rows, schema=schema)
        self._schema_key = None  # a new table: translate against the new schema
        return self.counts[name]

    def run(self, query: str, params: Mapping[str, Any] | None = None, *,
            declared: Mapping[str, Mapping[str, Any]] | None = None,
            now: datetime | str | None = None, timespan: timedelta | None = None) -> list[Row]:
        """Rows of ``query`` at ``now`` (default: the engine's), tables limited to ``timespan``.

        ``declared`` (a workbook's parameters, ``params.declared``) and ``params`` (values by
        name) substitute ``{Param}`` placeholders; without ``declared`` the query must have none.
        """
        moment = self.now if now is None else as_utc(now)
        if declared is not None:
            query = wbparams.substitute(query, declared, params, now=moment)
        elif wbparams.placeholders(query):
            raise wbparams.UnknownParameter(min(wbparams.placeholders(query)))
        self._show(moment, timespan)
        rel = self._relation(shims.rewrite(query), moment)
        names, kinds = rel.columns, [str(t) for t in rel.types]
        return [
            {n: (json.loads(v) if k == "JSON" and isinstance(v, str) else v)
             for n, k, v in zip(names, kinds, row, strict=True)}
            for row in rel.fetchall()
        ]

    def _relation(self, text: str, moment: datetime):
        """The query's result at ``moment``, translating a text only the first time: the SQL
        is kept with its bound values; the ones that are the translation's clock get ``moment``."""
        if self._schema_key is None:
            self._schema_key = tuple((t, tuple(c)) for t, c in sorted(self._schema().items()))
        key = (text, self._schema_key)
        hit = _TRANSLATED.get(key)
        if hit is None:
            translated = self._kql.to_sql(text, schema=dict(self._schema_key), query_now=moment)
            if translated.unbound:
                raise self._kql.KqlSchemaError(", ".join(translated.unbound),
                                               hint="a declared query parameter has no value")
            values = dict(translated.parameters)
            clock = tuple(k for k, v in values.items() if isinstance(v, datetime) and v == moment)
            if len(_TRANSLATED) >= 1000:
                _TRANSLATED.clear()
            hit = _TRANSLATED[key] = (str(translated), values, clock)
        sql, values, clock = hit
        bound = {**values, **dict.fromkeys(clock, moment)}
        return self.con.sql(sql, params=bound) if bound else self.con.sql(sql)


    def _schema(self) -> dict[str, list[str]]:
        """Table -> column names, from DuckDB's information_schema (what duckdb-kql needs to
        translate ``join``, ``union``, ``mv-expand`` and ``arg_max(..., *)``)."""
        out: dict[str, list[str]] = {}
        for table, column in self.con.execute(
                "SELECT table_name, column_name FROM information_schema.columns "
                "WHERE table_catalog = current_database() "
                "ORDER BY table_name, ordinal_position").fetchall():
            out.setdefault(table, []).append(column)
        return out

    def _show(self, moment: datetime, timespan: timedelta | None) -> None:
        """Point each table's view at the rows a query at ``moment`` may see."""
        until = _literal(moment)
        since = "" if timespan is None else \
            f' AND "TimeGenerated" >= {_literal(moment - timespan)} AND "TimeGenerated" <= {until}'
        for table in tables.TABLES:
            self.con.execute(
                f'CREATE OR REPLACE VIEW "{table}" AS SELECT * FROM "{tables.base_name(table)}" '
                f'WHERE "{shims.INGESTION_COLUMN}" <= {until}{since}'
            )


def as_utc(moment: datetime | str) -> datetime:
    """A naive UTC datetime (DuckDB's TIMESTAMP) from an aware datetime or an ISO 8601 string."""
    if isinstance(moment, str):
        moment = datetime.fromisoformat(moment)
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC).replace(tzinfo=None)
    return moment


def _literal(moment: datetime) -> str:
    return f"TIMESTAMP '{moment.isoformat(sep=' ')}'"
