"""The record contract's columns, loaded from ``contract.json``.

``contract.json`` is the one home of the column names and types: the record model, the Logs
Ingestion stand-in and the Bicep tables/DCR (``loadJsonContent``) all read it, and a test holds it
to ``record-contract.md``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

RECORDS = "records"
HEARTBEATS = "heartbeats"
PLATFORM = "platform"  # the collector's table (docs/record-contract.md §6)


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    type: str  # contract type: string, datetime, dynamic, int, long, real, bool
    description: str


@dataclass(frozen=True, slots=True)
class TableSpec:
    key: str  # "records" or "heartbeats"
    table: str  # Log Analytics table, e.g. ScheduledEvents_CL
    stream: str  # DCR stream, e.g. Custom-ScheduledEvents
    columns: tuple[Column, ...]

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    @property
    def short_name(self) -> str:
        """Table name without ``_CL`` (the Event Hubs ``Table`` property)."""
        return self.table.removesuffix("_CL")


@cache
def raw() -> dict[str, Any]:
    text = resources.files(__package__).joinpath("contract.json").read_text("utf-8")
    doc: dict[str, Any] = json.loads(text)
    return doc


@cache
def tables() -> dict[str, TableSpec]:
    out = {}
    for key, spec in raw()["tables"].items():
        cols = tuple(Column(c["name"], c["type"], c["description"]) for c in spec["columns"])
        out[key] = TableSpec(key, spec["table"], spec["stream"], cols)
    return out


def table(key: str) -> TableSpec:
    return tables()[key]


def by_stream(stream: str) -> TableSpec:
    for spec in tables().values():
        if spec.stream == stream:
            return spec
    raise KeyError(stream)
