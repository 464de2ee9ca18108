"""JSON Lines into the engine: read by DuckDB's own JSON reader, checked by its own casts,
streamed with bounded memory; what the engine cannot hold is counted and skipped, never fatal.
A file may be gzip-compressed (``.gz``): DuckDB reads it as it is.

One pass over a file (two when its first lines misled the sample, ``only``): DuckDB parses each
line into the columns of the target tables the file holds, then each
value is cast to its column's contract type with the engine's rules (``TRY_CAST``, which also
holds ``int`` and ``long`` to their 32 and 64 bits; a whole number for them; Kusto's datetime
range; a finite real). A line with a value the engine cannot hold is skipped, its first such
column named as the reason; so is a line that is not a JSON object of a known table (bad JSON, an
array, an unknown stream, no marker column). Text values longer than the agent ever sends
(``MAX_TEXT``) are cut, with a marker, and counted; a longer dynamic value skips its line.

The rows are written once, typed and compressed, into the engine's database file (DuckDB spills
to disk beyond its memory limit), into a table of their own per file: each Log Analytics table is
then a view of the lines that belong to it (``views``), so nothing is copied twice.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...errors import ReportError
from ...imds.parse import MAX_VALUE_BYTES

#: a text value longer than this (in characters) is cut to it: the agent never sends more
MAX_TEXT = MAX_VALUE_BYTES
#: a dynamic value whose JSON is longer than this cannot come from the agent: the line is skipped
MAX_DYNAMIC = 4 * MAX_VALUE_BYTES

#: contract type -> DuckDB type (duckdb-kql's mapping of the Kusto scalar types)
DUCK_TYPES = {
    "string": "VARCHAR",
    "datetime": "TIMESTAMP",
    "dynamic": "JSON",
    "int": "INTEGER",
    "long": "BIGINT",
    "real": "DOUBLE",
    "bool": "BOOLEAN",
}

NO_TABLE = (
    "not a row of a known table (bad JSON or UTF-8, not an object, an unknown stream, "
    "no Phase, Reason or Channel)"
)
_WORDS = {
    "string": "text",
    "datetime": "a time (ISO 8601, year 1 to 9999)",
    "int": "a 32-bit whole number",
    "long": "a 64-bit whole number",
    "real": "a finite number",
    "bool": "true or false",
    "dynamic": f"JSON of at most {MAX_DYNAMIC:,} bytes",
}

#: contract type -> the SQL of a checked value from the line's text ({c}); NULL when it is not one
_CAST = {
    "string": (
        f"CASE WHEN strlen({{c}}) > {MAX_TEXT} AND length({{c}}) > {MAX_TEXT} "
        f"THEN left({{c}}, {MAX_TEXT - 40}) || ' [cut: ' || length({{c}}) || ' characters]' "
        "ELSE {c} END"
    ),
    "datetime": (
        "CASE WHEN TRY_CAST({c} AS TIMESTAMPTZ) BETWEEN TIMESTAMPTZ '0001-01-01 00:00:00+00'"
        " AND TIMESTAMPTZ '9999-12-31 23:59:59.999999+00' "
        "THEN timezone('UTC', TRY_CAST({c} AS TIMESTAMPTZ)) END"
    ),
    "int": "CASE WHEN TRY_CAST({c} AS DOUBLE) = TRY_CAST({c} AS INTEGER) "
    "THEN TRY_CAST({c} AS INTEGER) END",
    "long": "CASE WHEN TRY_CAST({c} AS DOUBLE) = TRY_CAST({c} AS BIGINT) "
    "THEN TRY_CAST({c} AS BIGINT) END",
    "real": "CASE WHEN isfinite(TRY_CAST({c} AS DOUBLE)) THEN TRY_CAST({c} AS DOUBLE) END",
    "bool": "TRY_CAST({c} AS BOOLEAN)",
    "dynamic": f"CASE WHEN strlen({{c}}) <= {MAX_DYNAMIC} THEN {{c}} END",
}


class LoadError(ReportError):
    """A file DuckDB cannot read at all (one line for a person; the command exits 2)."""


@dataclass(frozen=True, slots=True)
class Target:
    """A table the file's lines may go to."""

    key: str  # the contract key ("records"), or the table's own name
    columns: tuple[tuple[str, str], ...]  # (name, contract type), the table's own columns
    ingested: bool = True  # has the hidden ingestion-time column
    stream: str | None = None  # the Logs Ingestion stream of a {"stream", "record"} line
    marker: str | None = None  # a bare line with this column (not null) is of this table
    required: tuple[str, ...] = ()  # columns a line must have


@dataclass(slots=True)
class FileLoad:
    """What one file gave: the table holding its lines, rows kept per target key, lines skipped
    by reason, values cut."""

    path: Path
    table: str
    rows: dict[str, int] = field(default_factory=dict)
    stored: tuple[str, ...] = ()  # the target keys whose columns the table holds
    skipped: Counter[str] = field(default_factory=Counter)
    cut: int = 0

    @property
    def skipped_total(self) -> int:
        return sum(self.skipped.values())


def load_file(
    con: Any,
    path: Path,
    table: str,
    targets: Sequence[Target],
    ingestion: str,
    *,
    wrapped: bool,
    only: Collection[str] | None = None,
) -> FileLoad:
    """Every line of ``path`` into the new table ``table`` (``_table``: the target key,
    ``_problem``: why the line is skipped, or NULL). ``wrapped``: lines are the Logs Ingestion
    stand-in's ``{"stream", "record"}``, else bare rows. ``only``: the keys of the targets whose
    columns to store (the tables a sample of the file holds: a file sink's file holds one, and
    parsing and writing the other tables' columns, all empty, cost a fifth of the load's CPU
    time, bench/README.md); when a line
    belongs to another target after all, the file is loaded again with every target's columns."""
    import duckdb  # the report extra

    stored = [t for t in targets if only is None or t.key in only] or list(targets)
    out = FileLoad(path, table, {t.key: 0 for t in targets}, tuple(t.key for t in stored))
    cols = _union(stored, ingestion)
    try:
        con.execute(
            f'CREATE OR REPLACE TABLE "{table}" AS '
            f"{_select(targets, stored, cols, ingestion, wrapped)}",
            [str(path)],
        )
    except (duckdb.IOException, duckdb.InvalidInputException) as exc:
        raise LoadError(f"{path}: cannot be read ({' '.join(str(exc).split())[:200]})") from None
    found = con.execute(
        f'SELECT _table, _problem, count(*), sum(_cut) FROM "{table}" GROUP BY ALL'
    ).fetchall()
    if len(stored) < len(targets) and any(key not in out.stored for key, *_ in found if key):
        return load_file(con, path, table, targets, ingestion, wrapped=wrapped)
    for key, problem, count, cut in found:
        if problem is None:
            out.rows[key] += count
            out.cut += int(cut or 0)
        else:
            out.skipped[_reason(problem, cols)] += count
    return out


def view_sql(target: Target, tables: Sequence[str], ingestion: str) -> str:
    """The rows of ``target`` in every table ``load_file`` made (an empty typed relation
    first, so the view has the target's types with no file at all)."""
    names = [n for n, _ in target.columns] + ([ingestion] if target.ingested else [])
    cols = ", ".join(f'"{n}"' for n in names)
    parts = [
        f"SELECT {cols} FROM \"{t}\" WHERE _table = '{target.key}' AND _problem IS NULL"
        for t in tables
    ]
    return " UNION ALL ".join([f"SELECT {cols} FROM ({_empty(target, ingestion)})", *parts])


def _empty(target: Target, ingestion: str) -> str:
    typed = [f'NULL::{DUCK_TYPES[k]} AS "{n}"' for n, k in target.columns]
    if target.ingested:
        typed.append(f'NULL::TIMESTAMP AS "{ingestion}"')
    return f"SELECT {', '.join(typed)} WHERE false"


def _union(targets: Sequence[Target], ingestion: str) -> dict[str, str]:
    """Every column of the targets, once, with its type (shared names must agree)."""
    out: dict[str, str] = {}
    for t in targets:
        for name, kind in (*t.columns, *([(ingestion, "datetime")] if t.ingested else [])):
            if out.setdefault(name, kind) != kind:
                raise ValueError(f"column {name} is {out[name]} in one table and {kind} in another")
    return out


def _select(
    targets: Sequence[Target],
    stored: Sequence[Target],
    cols: dict[str, str],
    ingestion: str,
    wrapped: bool,
) -> str:
    """SELECT (``?``: the file) of _table (any of ``targets``), each column of ``stored``
    typed, _problem and _cut."""
    read = {n: "JSON" if k == "dynamic" else "VARCHAR" for n, k in cols.items()}
    if wrapped:
        members = ", ".join(f'"{n}" {v}' for n, v in read.items())
        read = {"stream": "VARCHAR", "record": f"STRUCT({members})"}
        raw = ", ".join(f'"record"."{n}" AS "{n}"' for n in cols)
    else:
        read |= {t.marker: "VARCHAR" for t in targets if t.marker and t.marker not in read}
        raw = ", ".join(f'"{n}"' for n in read)
    struct = "{" + ", ".join(f"'{k}': '{v}'" for k, v in read.items()) + "}"
    typed = ", ".join(
        f'{_CAST[k].format(c=chr(34) + n + chr(34))} AS "{n}", "{n}" IS NOT NULL AS "{n}?"'
        for n, k in cols.items()
    )
    cut = (
        " + ".join(
            f'CASE WHEN strlen("{n}") > {MAX_TEXT} AND length("{n}") > {MAX_TEXT} THEN 1 ELSE 0 END'
            for n, k in cols.items()
            if k == "string"
        )
        or "0"
    )
    kept = ", ".join(_kept(n, k, ingestion) for n, k in cols.items())
    return (
        f"SELECT _table, {kept}, {_problem(stored, ingestion)} AS _problem, _cut FROM ("
        f"SELECT _table, {typed}, {cut} AS _cut FROM ("
        f"SELECT {_table(targets, list(cols), wrapped)} AS _table, {raw} "
        f"FROM read_json(?, format = 'newline_delimited', columns = {struct}, "
        "ignore_errors = true)))"
    )


def _kept(name: str, kind: str, ingestion: str) -> str:
    """A column as stored: a string is never null (Log Analytics), a row's ingestion time is
    its TimeGenerated when the line has none."""
    if kind == "string":
        return f"""coalesce("{name}", '') AS "{name}\""""
    if name == ingestion:
        return f'coalesce("{name}", "TimeGenerated") AS "{name}"'
    return f'"{name}"'


def _table(targets: Sequence[Target], names: list[str], wrapped: bool) -> str:
    """Which target a line belongs to (its stream, else its marker column), or NULL. With no
    marker, any line with a value is the target's (a line that is not a JSON object has none)."""
    if wrapped:
        arms = " ".join(f"WHEN '{t.stream}' THEN '{t.key}'" for t in targets if t.stream)
        return f'CASE "stream" {arms} END'
    some = "coalesce(" + ", ".join(f'"{n}"::VARCHAR' for n in names) + ")"
    arms = " ".join(
        f"""WHEN "{t.marker}" IS NOT NULL THEN '{t.key}'"""
        if t.marker
        else f"WHEN {some} IS NOT NULL THEN '{t.key}'"
        for t in targets
    )
    return f"CASE {arms} END"


def _problem(targets: Sequence[Target], ingestion: str) -> str:
    """The first column of the line's table the engine cannot hold (or is missing), else NULL;
    '' when the line belongs to no table."""
    arms = []
    for t in targets:
        names = [n for n, _ in t.columns] + ([ingestion] if t.ingested else [])
        checks = [f"""WHEN NOT "{n}?" THEN 'missing:{n}'""" for n in t.required]
        checks += [f"""WHEN "{n}?" AND "{n}" IS NULL THEN '{n}'""" for n in names]
        arms.append(f"WHEN '{t.key}' THEN CASE {' '.join(checks)} END")
    return f"CASE _table {' '.join(arms)} ELSE '' END"


def _reason(problem: str, cols: dict[str, str]) -> str:
    """A skipped line's reason, for a person."""
    if problem == "":
        return NO_TABLE
    if problem.startswith("missing:"):
        return f"{problem.removeprefix('missing:')}: missing"
    return f"{problem}: not {_WORDS[cols[problem]]}"
