"""The two Log Analytics tables in DuckDB: columns and types from the contract, rows loaded by
``load`` (DuckDB's JSON reader, every value checked against its column's type).

Each file loaded becomes a table of its own; each Log Analytics table is a view of the lines of
every file that belong to it (``base_name``). Rows given as dicts (the engine's API for tests,
Resource Graph rows) are written once as JSON Lines to the engine's folder and loaded like any
source file: two orders of magnitude faster than inserting row by row, and held to the same rules.

Log Analytics semantics kept here: a string column is never null (a missing value reads as
``""``, so ``isempty()`` and ``in`` behave as in Kusto); each row has an ingestion time (the
``_IngestionTime`` key of the row, or its ``TimeGenerated`` when absent).
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable, Mapping
from functools import cache
from pathlib import Path
from typing import Any

from ... import contract
from . import load
from .load import DUCK_TYPES
from .shims import INGESTION_COLUMN

__all__ = ["DUCK_TYPES", "TABLES", "Store", "base_name", "columns"]

#: table name -> the contract key of its rows
TABLES = {spec.table: key for key, spec in contract.tables().items()}

#: in a bare line (the file sink's), the column that says which table it belongs to
MARKERS = {contract.RECORDS: "Phase", contract.HEARTBEATS: "Reason", contract.PLATFORM: "Channel"}


def base_name(table: str) -> str:
    """The view of every row of ``table``; the engine shows a view of it at each moment."""
    return f"all_{table}"


def columns(table: str) -> list[tuple[str, str]]:
    """(name, contract type) of the table's columns, in contract order."""
    return [(c.name, c.type) for c in contract.table(TABLES[table]).columns]


@cache
def _target(table: str) -> load.Target:
    key = TABLES[table]
    return load.Target(
        key,
        tuple(columns(table)),
        stream=contract.table(key).stream,
        marker=MARKERS[key],
        required=("TimeGenerated",),
    )


class Store:
    """The loaded files of one database and the views over them."""

    def __init__(self, con: Any, workdir: Path) -> None:
        self.con, self.workdir = con, workdir
        self.loads: list[load.FileLoad] = []
        self._views: dict[str, tuple[load.Target, list[str]]] = {
            base_name(t): (_target(t), []) for t in TABLES
        }
        self._refresh()

    def load_file(self, path: Path) -> load.FileLoad:
        """A source file (the stand-in's ``{"stream", "record"}`` lines or the file sink's bare
        rows, of either table) into the two tables."""
        wrapped, seen = sample(path)
        loaded = load.load_file(
            self.con,
            path,
            self._name(),
            [_target(t) for t in TABLES],
            INGESTION_COLUMN,
            wrapped=wrapped,
            only=seen or None,
        )
        return self._add(loaded, [base_name(t) for t in TABLES if TABLES[t] in loaded.stored])

    def load_rows(
        self,
        table: str,
        rows: Iterable[Mapping[str, Any]],
        schema: list[tuple[str, str]] | None = None,
    ) -> load.FileLoad | None:
        """Rows of ``table`` as dicts (the keys of its columns; others are ignored); None when
        there was none. ``schema`` (name, Kusto type) loads a table that is not in the contract
        (Resource Graph's ``maintenanceresources``) as ``table`` itself, with no ingestion time:
        it is not a Log Analytics table and no time range applies to it."""
        ingested = schema is None
        target = (
            _target(table) if schema is None else load.Target(table, tuple(schema), ingested=False)
        )
        target = load.Target(target.key, target.columns, ingested=ingested)  # lines are bare rows
        view = base_name(table) if ingested else table
        self._views.setdefault(view, (target, []))
        path = self.workdir / f"{table}.rows.jsonl"
        names = [n for n, _ in target.columns] + ([INGESTION_COLUMN] if ingested else [])
        try:
            if not _write(path, rows, names):
                self._refresh()  # the table exists, empty (Resource Graph's answer of no rows)
                return None
            loaded = load.load_file(
                self.con, path, self._name(), [target], INGESTION_COLUMN, wrapped=False
            )
        finally:
            path.unlink(missing_ok=True)
        return self._add(loaded, [view])

    def count(self, view: str) -> int:
        (n,) = self.con.execute(f'SELECT count(*) FROM "{view}"').fetchone() or (0,)
        return int(n)

    def _name(self) -> str:
        return f"_file_{len(self.loads) + 1}"

    def _add(self, loaded: load.FileLoad, views: list[str]) -> load.FileLoad:
        self.loads.append(loaded)
        for view in views:
            self._views[view][1].append(loaded.table)
        self._refresh()
        return loaded

    def _refresh(self) -> None:
        for view, (target, files) in self._views.items():
            self.con.execute(
                f'CREATE OR REPLACE VIEW "{view}" AS '
                f"{load.view_sql(target, files, INGESTION_COLUMN)}"
            )


def sample(path: Path, lines: int = 1000, longest: int = 1 << 20) -> tuple[bool, set[str]]:
    """Whether the file holds the stand-in's ``{"stream", "record"}`` lines (its first JSON
    object says), and the contract keys of the tables its first ``lines`` lines hold (each read
    up to ``longest`` bytes): the loader stores those tables' columns only, and loads the file
    again with all of them if a later line belongs to another table."""
    wrapped: bool | None = None
    seen: set[str] = set()
    streams = {contract.table(k).stream: k for k in TABLES.values()}
    try:
        with gzip.open(path, "rb") if path.suffix == ".gz" else path.open("rb") as f:
            for _ in range(lines):
                line = f.readline(longest)
                if not line:
                    break
                try:
                    row = json.loads(line)
                except (ValueError, RecursionError):  # not a row (the loader counts it skipped)
                    continue
                if not isinstance(row, dict):
                    continue
                if wrapped is None:
                    wrapped = "stream" in row and "record" in row
                if wrapped:  # a stream of another JSON type (hostile) names no table
                    stream = row.get("stream")
                    key = streams.get(stream) if isinstance(stream, str) else None
                else:
                    key = next((k for k, m in MARKERS.items() if row.get(m) is not None), None)
                if key:
                    seen.add(key)
    except (OSError, EOFError):  # not gzip after all: the loader says so when it reads it
        pass
    return bool(wrapped), seen


def _write(path: Path, rows: Iterable[Mapping[str, Any]], names: list[str]) -> int:
    count = 0
    with path.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps({n: row.get(n) for n in names}, separators=(",", ":"), default=str))
            f.write("\n")
            count += 1
    return count
