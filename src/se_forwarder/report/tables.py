"""The two Log Analytics tables in DuckDB: columns and types from the contract, rows loaded fast.

Rows are dicts in the contract's shape (what the agent emits: ISO 8601 strings for datetimes,
lists for dynamic columns). They are written once as JSON Lines to a temporary file and read by
DuckDB's JSON reader, which is two orders of magnitude faster than inserting row by row.

Log Analytics semantics kept here: a string column is never null (a missing value reads as
``""``, so ``isempty()`` and ``in`` behave as in Kusto); each row has an ingestion time (the
``_IngestionTime`` key of the row dict, or its ``TimeGenerated`` when absent).
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from .. import contract
from .shims import INGESTION_COLUMN

#: contract type -> DuckDB type (duckdb-kql's mapping of the Kusto scalar types)
DUCK_TYPES = {"string": "VARCHAR", "datetime": "TIMESTAMP", "dynamic": "JSON", "int": "INTEGER",
              "long": "BIGINT", "real": "DOUBLE", "bool": "BOOLEAN"}

#: table name -> the contract key of its rows
TABLES = {spec.table: key for key, spec in contract.tables().items()}


def base_name(table: str) -> str:
    """The DuckDB table holding every row of ``table``; the engine shows a view of it."""
    return f"all_{table}"


def columns(table: str) -> list[tuple[str, str]]:
    """(name, contract type) of the table's columns, in contract order."""
    return [(c.name, c.type) for c in contract.table(TABLES[table]).columns]


def load(con: Any, table: str, rows: Iterable[Mapping[str, Any]], workdir: Path | None = None,
         *, schema: list[tuple[str, str]] | None = None) -> int:
    """Create ``base_name(table)`` holding ``rows``; returns the number of rows.

    ``schema`` (name, Kusto type) loads a table that is not in the contract (Resource Graph's
    ``maintenanceresources``) as ``table`` itself, with no ingestion time: it is not a Log
    Analytics table and no time range applies to it.
    """
    cols = columns(table) if schema is None else list(schema)
    ingested = schema is None
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        path = Path(tmp) / "rows.jsonl"
        count = _write(path, rows, [name for name, _ in cols], ingested)
        read_types = {name: ("JSON" if kind == "dynamic" else "VARCHAR") for name, kind in cols}
        select = [_cast(name, kind) for name, kind in cols]
        if ingested:
            read_types[INGESTION_COLUMN] = "VARCHAR"
            select.append(f"{_timestamp(INGESTION_COLUMN)} AS {INGESTION_COLUMN}")
        target = base_name(table) if ingested else table
        con.execute(
            f'CREATE OR REPLACE TABLE "{target}" AS SELECT {", ".join(select)} '
            f"FROM read_json(?, format = 'newline_delimited', columns = {_struct(read_types)})",
            [str(path)],
        )
    return count


def _write(path: Path, rows: Iterable[Mapping[str, Any]], names: list[str], ingested: bool) -> int:
    count = 0
    with path.open("w", encoding="utf-8") as f:
        for row in rows:
            out = {n: row.get(n) for n in names}
            if ingested:
                out[INGESTION_COLUMN] = row.get(INGESTION_COLUMN) or row.get("TimeGenerated")
            f.write(json.dumps(out, separators=(",", ":"), ensure_ascii=False, default=str))
            f.write("\n")
            count += 1
    return count


def _timestamp(name: str) -> str:
    # ISO 8601 with a trailing Z (the contract's format); DuckDB's TIMESTAMP is naive UTC
    return f"CAST(rtrim(replace(\"{name}\", 'T', ' '), 'Z') AS TIMESTAMP)"


def _cast(name: str, kind: str) -> str:
    if kind == "datetime":
        return f'{_timestamp(name)} AS "{name}"'
    if kind == "string":
        return f"coalesce(\"{name}\", '') AS \"{name}\""
    if kind == "dynamic":
        return f'"{name}" AS "{name}"'
    return f'CAST("{name}" AS {DUCK_TYPES[kind]}) AS "{name}"'


def _struct(types: Mapping[str, str]) -> str:
    return "{" + ", ".join(f"'{k}': '{v}'" for k, v in types.items()) + "}"
