"""Run the project's KQL (workbooks, alerts, library) over records and heartbeats, locally.

``Engine(records, heartbeats, now=...)`` loads the two Log Analytics tables into DuckDB and
``run(query, params)`` executes KQL on them through duckdb-kql, the way Log Analytics would:

* ``now()`` and ``ago()`` are the evaluation moment (``now``; alerts are evaluated at several);
* a row exists from its ingestion time on: rows ingested after ``now`` are not visible, and
  ``ingestion_time()`` returns each row's ingestion time (see ``shims``);
* the query's time range (a workbook item's time context, an alert's query time range) limits
  every table to ``TimeGenerated`` in ``[now - timespan, now]``, as the query API does;
* workbook ``{Param}`` placeholders are substituted as the portal does (``params``); a
  drop-down that opens on what its own query selects gets that value, its query run here at the
  same moment (``params.query_default``);
* a report announces its queries first (``share``): a ``let`` several of them define alike is
  computed once and read as a table (``shared``), with the same rows.

Needs the ``report`` extra (``pip install se-forwarder[report]``: duckdb-kql with DuckDB).
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
import weakref
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from pathlib import Path
from typing import Any, Self

from ... import contract
from . import kqlcache, load, moments, narrow, shared, shims, tables
from . import params as wbparams

Row = dict[str, Any]

#: DuckDB's memory for the tables and the queries (it spills to the engine's folder beyond it);
#: the report's process peaks a little above it (bench/report_speed.py, bench/report_memory.py)
MEMORY_LIMIT = "3GB"

#: DuckDB optimizer passes the engine skips: planning the definitions' SQL (200-300 kB a query)
#: is most of an evaluation on a small fleet, and projection pullup was 1.2 s of 1.75 s of
#: optimizing services-upcoming (DuckDB's profiler). Without it: the same rows (in another order
#: where the query orders none) and 25-30% less CPU for the library's and alerts' queries, on 58
#: and on 348 VMs (measured in one run, one before the other, twice)
SKIPPED_OPTIMIZERS = ("projection_pullup",)

#: moments ``run_at`` plans in one query: the rows of all of them are in DuckDB's memory at once
MOMENTS_AT_ONCE = 64

#: translated SQL by (query text, schema): the clock (``now()``, ``ago()``) is a bound value in
#: duckdb-kql's SQL, so one translation serves every moment and every engine over the same tables
#: (alerts are evaluated at hundreds of moments; translating is most of a query's cost on small
#: tables); kept on disk as well when SE_FORWARDER_KQL_CACHE names a folder (kqlcache)
_TRANSLATED: dict[tuple[Any, ...], kqlcache.Translation] = {}


class Engine:
    """The contract's tables loaded once; any number of queries, each at its own moment.

    Rows come from JSON Lines ``files`` (read by DuckDB itself, streamed: a file of any size loads
    within ``memory_limit``) and from ``records`` / ``heartbeats`` / ``platform`` given as dicts
    (a table with none is empty); both are checked by ``load`` (what the engine cannot hold is
    skipped and counted in ``loads``). The
    database lives in a temporary folder of its own, removed by ``close()`` (or when the engine
    is collected). ``now`` defaults to the newest moment a row exists at.
    """

    def __init__(
        self,
        records: Iterable[Mapping[str, Any]] = (),
        heartbeats: Iterable[Mapping[str, Any]] = (),
        *,
        now: datetime | str | None = None,
        files: Iterable[Path] = (),
        platform: Iterable[Mapping[str, Any]] = (),
        memory_limit: str = MEMORY_LIMIT,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        import duckdb_kql  # the report extra; imported here so the agent never needs it

        self._kql = duckdb_kql
        self.workdir = Path(tempfile.mkdtemp(prefix="se-report-"))
        self.con = duckdb_kql.connect(str(self.workdir / "engine.duckdb"))
        self._finalizer = weakref.finalize(self, _discard, self.con, self.workdir)
        self.con.execute(
            f"SET memory_limit = '{memory_limit}'; SET TimeZone = 'UTC'; "
            f"SET temp_directory = '{self.workdir / 'spill'}'; "
            f"SET disabled_optimizers = '{','.join(SKIPPED_OPTIMIZERS)}'"
        )
        self.store = tables.Store(self.con, self.workdir)
        for path in files:
            if progress:
                progress(f"loading {path}")
            self.store.load_file(path)
        given = {
            contract.RECORDS: records,
            contract.HEARTBEATS: heartbeats,
            contract.PLATFORM: platform,
        }
        for table, key in tables.TABLES.items():
            self.store.load_rows(table, given[key])
        self.con.execute("CHECKPOINT")
        self.counts = {t: self.store.count(tables.base_name(t)) for t in tables.TABLES}
        self.now = as_utc(now) if now is not None else self.newest()
        self._schema_key: tuple[Any, ...] | None = None
        self._text_columns: frozenset[str] = frozenset()  # VARCHAR in some table (``narrow``)
        #: queries run as translated after a narrowed guess failed (``narrow``), and how many
        self._wide: set[str] = set()
        self.widened = 0
        self._plan: shared.Plan | None = None
        self._stored: dict[tuple[Any, ...], str] = {}  # (closure, moment, timespan) -> its table
        self._shown: tuple[datetime, timedelta | None] | None = None  # what the views show
        #: query-driven parameter defaults by (name, moment, values given): the report's items
        #: that read one parameter run its query once
        self._defaults: dict[tuple[str, datetime, str], Any] = {}

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the database and remove its folder (idempotent)."""
        self._finalizer()

    def newest(self) -> datetime:
        """The newest moment a row exists at (its ingestion time); the epoch with no rows."""
        union = " UNION ALL ".join(
            f'SELECT max("{shims.INGESTION_COLUMN}") AS t FROM "{tables.base_name(t)}"'
            for t in tables.TABLES
        )
        (found,) = self.con.execute(f"SELECT max(t) FROM ({union})").fetchone() or (None,)
        return found or datetime(1970, 1, 1)

    def oldest(self) -> datetime | None:
        """The oldest moment a row was made at (``TimeGenerated``); None with no rows."""
        union = " UNION ALL ".join(
            f'SELECT min("TimeGenerated") AS t FROM "{tables.base_name(t)}"' for t in tables.TABLES
        )
        (found,) = self.con.execute(f"SELECT min(t) FROM ({union})").fetchone() or (None,)
        return as_utc(found) if found is not None else None

    @property
    def loads(self) -> list[load.FileLoad]:
        """What each file (or list of rows) gave: rows kept, lines skipped and why."""
        return self.store.loads

    def load_table(
        self, name: str, schema: list[tuple[str, str]], rows: Iterable[Mapping[str, Any]]
    ) -> int:
        """Load another table (``schema``: (column, Kusto type)), e.g. Resource Graph's
        ``maintenanceresources`` from a file of its rows; queries see all of it, at any moment.
        Rows the engine cannot hold are skipped (``loads``)."""
        self.store.load_rows(name, rows, schema)
        self.counts[name] = self.store.count(name)
        self._schema_key = None  # a new table: translate against the new schema
        return self.counts[name]

    def run(
        self,
        query: str,
        params: Mapping[str, Any] | None = None,
        *,
        declared: Mapping[str, Mapping[str, Any]] | None = None,
        now: datetime | str | None = None,
        timespan: timedelta | None = None,
    ) -> list[Row]:
        """Rows of ``query`` at ``now`` (default: the engine's), tables limited to ``timespan``.

        ``declared`` (a workbook's parameters, ``params.declared``) and ``params`` (values by
        name) substitute ``{Param}`` placeholders; without ``declared`` the query must have none.
        """
        moment = self.now if now is None else as_utc(now)
        text = self._text(query, params, declared, moment)
        if self._plan is not None:
            text = self._plan.rewrite(
                text, timespan, lambda closure: self._store(closure, moment, timespan)
            )
        self._show(moment, timespan)
        # executed at once, not through a relation: a relation binds the SQL to describe its
        # columns and binds it again to run it, and binding the views' SQL is half a query's cost
        rows, described = self._planned(
            text, moment, lambda sql, bound, _: self._execute(sql, bound)
        )
        return _rows(rows, described)

    def run_at(
        self,
        query: str,
        at: Iterable[datetime | str],
        *,
        timespan: timedelta | None = None,
        params: Mapping[str, Any] | None = None,
        declared: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> dict[datetime, list[Row]]:
        """Rows of ``query`` at each moment of ``at`` (keys: as ``as_utc`` gives them), as
        ``run(query, params, declared=declared, now=m, timespan=timespan)`` gives them but in no
        particular order within a moment, planned once for all of them (``moments``): an alert's
        evaluations over a day cost about one. Placeholders are substituted at each moment (a
        drop-down's default is a query at that moment) and the moments whose text comes out the
        same are planned together; without ``declared`` a query with placeholders is refused.
        One ``moments`` cannot rewrite is run at each moment."""
        times = sorted({as_utc(m) for m in at})
        if not times:
            return {}
        if declared is None:  # the text is the same at every moment (or refused)
            groups = {self._text(query, params, None, times[0]): times}
        else:
            groups = {}
            for m in times:
                groups.setdefault(self._text(query, params, declared, m), []).append(m)
        out: dict[datetime, list[Row]] = {}
        for text, group in groups.items():
            rows = self._at(text, group, timespan)
            if rows is None:  # not rewritable: one run per moment
                rows = {
                    m: self.run(query, params, declared=declared, now=m, timespan=timespan)
                    for m in group
                }
            out.update(rows)
        return out

    def _at(
        self, text: str, times: list[datetime], timespan: timedelta | None
    ) -> dict[datetime, list[Row]] | None:
        """``run_at`` of a substituted text; None when ``moments`` cannot rewrite its SQL."""
        self._show(times[0], timespan)  # the views' columns are what the query is translated on
        out: dict[datetime, list[Row]] = {m: [] for m in times}
        for start in range(0, len(times), MOMENTS_AT_ONCE):
            chunk = times[start : start + MOMENTS_AT_ONCE]

            def work(
                sql: str,
                bound: dict[str, Any],
                clock: tuple[str, ...],
                chunk: list[datetime] = chunk,
            ) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]] | None:
                joined = moments.lateral(sql, clock, timespan)
                if joined is None:
                    return None
                self.con.execute(
                    f"CREATE OR REPLACE TEMP TABLE {moments.TABLE} AS "
                    "SELECT CAST(unnest($i) AS BIGINT) AS i, CAST(unnest($t) AS TIMESTAMP) AS t",
                    {"i": list(range(len(chunk))), "t": chunk},
                )
                rest = {k: v for k, v in bound.items() if k not in clock}
                return self._execute(joined, rest)

            done = self._planned(text, chunk[0], work)
            if done is None:
                return None
            for row in _rows(*done):
                out[chunk[row.pop(moments.INDEX)]].append(row)
        return out

    def share(
        self,
        queries: Iterable[
            tuple[
                str,
                Mapping[str, Any] | None,
                Mapping[str, Mapping[str, Any]] | None,
                timedelta | None,
            ]
        ],
    ) -> None:
        """Announce the queries about to run (as ``run``'s query, params, declared, timespan):
        from then on a ``let`` that two of them or more define alike (same closure, parameter
        values and time range) is computed once per moment and read from a table (``shared``).
        A query that cannot be prepared shares nothing (``run`` says why when it runs)."""
        texts = []
        for query, params, declared, timespan in queries:
            try:
                texts.append((self._text(query, params, declared, self.now), timespan))
            except (ValueError, KeyError):  # UnknownParameter, an unterminated literal...
                continue
        self._plan = shared.Plan(texts)

    def _text(
        self,
        query: str,
        params: Mapping[str, Any] | None,
        declared: Mapping[str, Mapping[str, Any]] | None,
        moment: datetime,
    ) -> str:
        """The KQL the engine runs: placeholders substituted, shims applied."""
        if declared is not None:
            query = wbparams.substitute(
                query,
                declared,
                params,
                now=moment,
                resolve=lambda name: self._default(name, declared, params or {}, moment),
            )
        elif wbparams.placeholders(query):
            raise wbparams.UnknownParameter(min(wbparams.placeholders(query)))
        return shims.rewrite(query)

    def _store(self, closure: str, moment: datetime, timespan: timedelta | None) -> str:
        """The table holding the rows of ``closure`` (a shared let, see ``shared``) at
        ``moment`` within ``timespan``, computed the first time."""
        key = (closure, moment, timespan)
        if key not in self._stored:
            name = f"shared_let_{len(self._stored) + 1}"
            self._show(moment, timespan)
            self._planned(
                closure,
                moment,
                lambda sql, bound, _clock: (
                    self.con.sql(sql, params=bound) if bound else self.con.sql(sql)
                ).create(name),
            )
            self._stored[key] = name
            self._schema_key = None  # a new table: translate against the new schema
        return self._stored[key]

    def _default(
        self,
        name: str,
        declared: Mapping[str, Mapping[str, Any]],
        params: Mapping[str, Any],
        moment: datetime,
    ) -> Any:
        """The value a query-driven drop-down opens on: its query's selected row, the query run
        with the same parameter values and its own time range (``timeContextFromParameter``)."""
        key = (name, moment, repr(sorted(params.items())))
        if key not in self._defaults:
            prm = declared[name]
            span = None
            ranged = prm.get("timeContextFromParameter")
            if ranged:
                given = params.get(ranged)
                span = (given or wbparams.saved_value(declared[ranged])).duration
            rows = self.run(prm["query"], params, declared=declared, now=moment, timespan=span)
            self._defaults[key] = wbparams.selected_value(prm, rows)
        return self._defaults[key]

    def sql(
        self,
        query: str,
        params: Mapping[str, Any] | None = None,
        *,
        declared: Mapping[str, Mapping[str, Any]] | None = None,
        narrowed: bool = True,
    ) -> tuple[str, dict[str, Any]]:
        """The SQL ``run`` gives DuckDB for ``query`` at the engine's moment (no shared lets),
        with its bound values: what a query costs to translate and plan (bench/query_sql.py);
        with ``narrowed=False``, as duckdb-kql wrote it (``narrow``)."""
        self._show(self.now, None)
        text = self._text(query, params, declared, self.now)
        sql, bound, _ = self._translated(text, self.now, narrowed=narrowed)
        return sql, bound

    def _planned(
        self,
        text: str,
        moment: datetime,
        work: Callable[[str, dict[str, Any], tuple[str, ...]], Any],
    ) -> Any:
        """``work(sql, bound, clock)`` on the query's narrowed SQL (``narrow``); if a narrowed
        value is not text after all, on the SQL as duckdb-kql wrote it (and so from then on)."""
        import duckdb

        def attempt(narrowed: bool) -> Any:
            sql, bound, clock = self._translated(text, moment, narrowed=narrowed)
            return self._retrying(lambda: work(sql, bound, clock))

        wide = text in self._wide
        try:
            return attempt(not wide)
        except duckdb.Error as exc:
            if wide or narrow.GUARD not in str(exc):
                raise
        self._wide.add(text)
        self.widened += 1
        return attempt(False)

    def _translated(
        self, text: str, moment: datetime, *, narrowed: bool = True
    ) -> tuple[str, dict[str, Any], tuple[str, ...]]:
        """The query's SQL (``narrowed`` where the engine knows a value is text) and its values
        at ``moment``, translating a text only the first time: the SQL is kept with its bound
        values; the ones that are the translation's clock get ``moment``."""
        if self._schema_key is None:
            names, self._text_columns = self._schema()
            self._schema_key = tuple((t, tuple(c)) for t, c in sorted(names.items()))
        schema = _named(text, self._schema_key)
        key = (text, schema)
        hit = _TRANSLATED.get(key)
        if hit is None:
            folder = kqlcache.directory()
            if folder is None:
                hit = self._translate(text, schema, moment)
            else:
                name = kqlcache.key(text, schema)
                with kqlcache.claim(folder, name):
                    hit = kqlcache.get(folder, name)
                    if hit is None:
                        hit = self._translate(text, schema, moment)
                        kqlcache.put(folder, name, hit)
            if len(_TRANSLATED) >= 1000:
                _TRANSLATED.clear()
            _TRANSLATED[key] = hit
        sql, values, clock = hit
        if narrowed:
            sql = _narrowed(sql, self._text_columns)
        return sql, {**values, **dict.fromkeys(clock, moment)}, clock

    def _translate(
        self, text: str, schema: tuple[Any, ...], moment: datetime
    ) -> kqlcache.Translation:
        translated = self._kql.to_sql(text, schema=dict(schema), query_now=moment)
        if translated.unbound:
            raise self._kql.KqlSchemaError(
                ", ".join(translated.unbound), hint="a declared query parameter has no value"
            )
        values = dict(translated.parameters)
        clock = tuple(k for k, v in values.items() if isinstance(v, datetime) and v == moment)
        return str(translated), values, clock

    def _execute(
        self, sql: str, bound: dict[str, Any]
    ) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
        """The rows of ``sql`` with ``bound`` values, and its columns (DB-API ``description``)."""
        result = self.con.execute(sql, bound) if bound else self.con.execute(sql)
        return result.fetchall(), result.description

    def _schema(self) -> tuple[dict[str, list[str]], frozenset[str]]:
        """Table -> column names, from DuckDB's information_schema (what duckdb-kql needs to
        translate ``join``, ``union``, ``mv-expand`` and ``arg_max(..., *)``), and the names of
        the columns some table holds as text (``narrow``)."""
        out: dict[str, list[str]] = {}
        text: set[str] = set()
        for table, column, kind in self.con.execute(
            "SELECT table_name, column_name, data_type FROM information_schema.columns "
            "WHERE table_catalog = current_database() "
            "ORDER BY table_name, ordinal_position"
        ).fetchall():
            out.setdefault(table, []).append(column)
            if kind == "VARCHAR":
                text.add(column)
        return out, frozenset(text)

    def _retrying(self, work: Callable[[], Any]) -> Any:
        """``work()`` (a query's rows, or a table made of them). A query out of memory runs once
        more on one thread: DuckDB keeps a hash table per thread, and one spills to disk where
        several did not fit."""
        import duckdb

        try:
            return work()
        except duckdb.OutOfMemoryException:
            (threads,) = self.con.execute("SELECT current_setting('threads')").fetchone() or (1,)
            self.con.execute("SET threads = 1")
            try:
                return work()
            finally:
                self.con.execute(f"SET threads = {int(threads)}")

    def _show(self, moment: datetime, timespan: timedelta | None) -> None:
        """Point each table's view at the rows a query at ``moment`` may see (kept while the
        moment and the time range stay: a report's items and a moment's queries share them)."""
        if self._shown == (moment, timespan):
            return
        until = _literal(moment)
        since = (
            ""
            if timespan is None
            else f' AND "TimeGenerated" >= {_literal(moment - timespan)}'
            f' AND "TimeGenerated" <= {until}'
        )
        for table in tables.TABLES:
            self.con.execute(
                f'CREATE OR REPLACE VIEW "{table}" AS SELECT * FROM "{tables.base_name(table)}" '
                f'WHERE "{shims.INGESTION_COLUMN}" <= {until}{since}'
            )
        self._shown = (moment, timespan)


#: a ``union`` naming its tables by a wildcard (``union Sched*``): it may read any table
_WILDCARD_UNION = re.compile(r"\bunion\b[^|]*\*")


@lru_cache(maxsize=256)
def _narrowed(sql: str, text_columns: frozenset[str]) -> str:
    """``narrow.narrowed``, once per translation and set of text columns (a query is run at
    hundreds of moments)."""
    return narrow.narrowed(sql, text_columns)


def _rows(rows: list[tuple[Any, ...]], described: list[tuple[Any, ...]]) -> list[Row]:
    """Rows as dicts by column name, JSON values decoded (Log Analytics' dynamic)."""
    names, kinds = [d[0] for d in described], [str(d[1]) for d in described]
    return [
        {
            n: (json.loads(v) if k == "JSON" and isinstance(v, str) else v)
            for n, k, v in zip(names, kinds, row, strict=True)
        }
        for row in rows
    ]


def _named(text: str, schema: tuple[Any, ...]) -> tuple[Any, ...]:
    """The part of ``schema`` ((table, columns) pairs) that ``text`` can read: the tables it
    names. duckdb-kql consults only the columns of the tables a query reads, so a translation
    keyed by these alone serves every engine whose other tables differ (a report with Resource
    Graph's tables, a test without, the shared lets' tables): one translation, not one per
    engine (translating is most of a small report's CPU)."""
    if _WILDCARD_UNION.search(text):
        return schema
    words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text))
    return tuple(entry for entry in schema if entry[0] in words)


def _discard(con: Any, workdir: Path) -> None:
    con.close()
    shutil.rmtree(workdir, ignore_errors=True)


def as_utc(moment: datetime | str) -> datetime:
    """A naive UTC datetime (DuckDB's TIMESTAMP) from an aware datetime or an ISO 8601 string."""
    if isinstance(moment, str):
        moment = datetime.fromisoformat(moment)
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC).replace(tzinfo=None)
    return moment


def _literal(moment: datetime) -> str:
    return f"TIMESTAMP '{moment.isoformat(sep=' ')}'"
