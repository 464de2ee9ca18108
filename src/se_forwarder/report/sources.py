"""Where the report's rows come from: the Logs Ingestion stand-in's stored rows, the file sink's
JSON Lines, or a generated fleet.

* stand-in (``log-analytics.jsonl``): one ``{"stream": "Custom-...", "record": {...}}`` per line,
  the rows the stand-in accepted (``standins/logs_ingestion/records.py``); the stream names the
  table;
* file sink (``records.jsonl``, ``heartbeats.jsonl``): one row per line, in the contract's
  shape; a row with ``Phase`` is a record, one with ``Reason`` a heartbeat;
* a directory: the stand-in's file when it has one (what Log Analytics would hold), else the
  file sink's two files (what ``demo`` writes);
* ``--fleet N --days D``: ``se_forwarder_testbed.fleet`` (the test bed).

A line that is not a JSON object, names no known stream or table, lacks a ``TimeGenerated``, or
holds a value its column's contract type cannot (a datetime that does not parse, text in a number
column) is malformed: counted per file and skipped, never fatal.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from .. import contract
from ..errors import ReportError
from .shims import INGESTION_COLUMN

STANDIN_FILE = "log-analytics.jsonl"
SINK_FILES = ("records.jsonl", "heartbeats.jsonl")


class SourceError(ReportError):
    """No usable source (one line for a person; the command exits 2)."""


@dataclass(slots=True)
class Rows:
    records: list[dict[str, Any]] = field(default_factory=list)
    heartbeats: list[dict[str, Any]] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)  # malformed lines by file
    described: list[str] = field(default_factory=list)  # what was read, for the page
    now: datetime | None = None  # the natural evaluation moment (a fleet's end)

    def newest(self) -> datetime:
        """The newest moment a row exists at (its ingestion time, else its TimeGenerated)."""
        return max(_moment(r) for r in self.records + self.heartbeats)


def read_paths(paths: list[Path]) -> Rows:
    out = Rows()
    for path in paths:
        for file in _files(path):
            _read_file(file, out)
    if not out.records and not out.heartbeats:
        raise SourceError(f"no rows in {', '.join(str(p) for p in paths)}"
                          + (f" ({sum(out.skipped.values())} malformed lines skipped)"
                             if out.skipped else ""))
    return out


def _files(path: Path) -> list[Path]:
    if not path.exists():
        raise SourceError(f"{path}: no such file or directory")
    if path.is_file():
        return [path]
    if (path / STANDIN_FILE).is_file():
        return [path / STANDIN_FILE]
    found = [path / name for name in SINK_FILES if (path / name).is_file()]
    if not found:
        raise SourceError(f"{path}: holds neither {STANDIN_FILE} nor {' / '.join(SINK_FILES)}")
    return found


_CHECKS = {"string": lambda v: isinstance(v, str),
           "datetime": lambda v: _is_time(v),
           "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
           "long": lambda v: isinstance(v, int) and not isinstance(v, bool),
           "real": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
           "bool": lambda v: isinstance(v, bool),
           "dynamic": lambda v: True}


def _types() -> dict[str, dict[str, Any]]:
    return {key: {c.name: _CHECKS[c.type] for c in spec.columns}
            for key, spec in contract.tables().items()}


def _read_file(file: Path, out: Rows) -> None:
    by_stream = {spec.stream: key for key, spec in contract.tables().items()}
    types = _types()
    counts = {contract.RECORDS: 0, contract.HEARTBEATS: 0}
    bad = 0
    with file.open("r", encoding="utf-8", errors="replace") as f:
        for line in f:
            if not line.strip():
                continue
            key, row = _classify(line, by_stream)
            if key is None or not all(v is None or types[key].get(k, _any)(v)
                                      for k, v in row.items()):
                bad += 1
                continue
            (out.records if key == contract.RECORDS else out.heartbeats).append(row)
            counts[key] += 1
    if bad:
        out.skipped[str(file)] = bad
    out.described.append(f"{file}: {counts[contract.RECORDS]:,} records, "
                         f"{counts[contract.HEARTBEATS]:,} heartbeats"
                         + (f", {bad:,} malformed lines skipped" if bad else ""))


def _classify(line: str, by_stream: dict[str, str]) -> tuple[str | None, dict[str, Any]]:
    try:
        doc = json.loads(line)
    except ValueError:
        return None, {}
    if not isinstance(doc, dict):
        return None, {}
    if "stream" in doc and "record" in doc:
        key, row = by_stream.get(doc["stream"]), doc["record"]
    else:
        key = contract.RECORDS if "Phase" in doc else contract.HEARTBEATS if "Reason" in doc else None
        row = doc
    if key is None or not isinstance(row, dict) or not _is_time(row.get("TimeGenerated")):
        return None, {}
    return key, row


def _any(_value: Any) -> bool:
    return True


def _is_time(value: Any) -> bool:
    if not isinstance(value, str):
        return False
    try:
        datetime.fromisoformat(value)
    except ValueError:
        return False
    return True


def _moment(row: dict[str, Any]) -> datetime:
    value = row.get(INGESTION_COLUMN) or row["TimeGenerated"]
    return datetime.fromisoformat(value)


def generated(vms: int, days: int) -> Rows:
    """A fleet from the test bed's generator (the ``standins`` extra)."""
    try:
        from se_forwarder_testbed.fleet import FleetSpec, generate
    except ImportError as exc:
        raise SourceError(f"--fleet needs the test bed (pip install se-forwarder[standins]): "
                          f"{exc}") from None
    from ..timefmt import format_ms

    fleet = generate(FleetSpec(vms=vms, days=days))
    rows = Rows(fleet.records, fleet.heartbeats)
    rows.now = datetime.fromisoformat(format_ms(fleet.truth.end))
    rows.described.append(f"generated fleet: {len(fleet.truth.vms):,} VMs over {days} days "
                          f"({len(fleet.records):,} records, {len(fleet.heartbeats):,} heartbeats)")
    return rows
