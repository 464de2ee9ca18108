"""Where the report's rows come from: the Logs Ingestion stand-in's stored rows, the file sink's
JSON Lines, or a generated fleet. Files are only found here; the engine reads them (``load``).

* stand-in (``log-analytics.jsonl``): one ``{"stream": "Custom-...", "record": {...}}`` per line,
  the rows the stand-in accepted (``standins/logs_ingestion/records.py``); the stream names the
  table;
* file sink (``records.jsonl``, ``heartbeats.jsonl``, and the collector's ``platform.jsonl``,
  its ``platform_path``): one row per line, in the contract's shape; a row with ``Phase`` is a
  record, one with ``Reason`` a heartbeat, one with ``Channel`` a row of Azure's own record
  (``ScheduledEventsPlatform_CL``): the agents' files and the collector's are given together,
  in any order, and the report puts the platform's side beside the agents' (verified outcomes,
  agentless VMs);
* a directory: the stand-in's file when it has one (what Log Analytics would hold), else the
  file sink's files it holds (what ``demo`` writes, and the collector's beside them);
* ``--fleet N --days D``: ``se_forwarder_testbed.fleet`` (the test bed), streamed to JSON Lines
  in a temporary folder, so a fleet of any size is generated in bounded memory.

A line that is not a JSON object, names no known stream or table, lacks a ``TimeGenerated``, or
holds a value its column's type cannot (a time DuckDB does not read, a FaultDomain past 32 bits)
is malformed: counted per file with its reason and skipped, never fatal (``load``).
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from .. import contract
from ..errors import ReportError
from .kql.load import FileLoad

STANDIN_FILE = "log-analytics.jsonl"
SINK_FILES = ("records.jsonl", "heartbeats.jsonl", "platform.jsonl")


class SourceError(ReportError):
    """No usable source (one line for a person; the command exits 2)."""


@dataclass(slots=True)
class Rows:
    """The files to load, and what is known of them before loading."""

    files: list[Path] = field(default_factory=list)
    now: datetime | None = None  # the natural evaluation moment (a fleet's end)
    label: str = ""  # what the files are, when not files a person named (a generated fleet)
    folder: tempfile.TemporaryDirectory[str] | None = None  # owns generated files

    def close(self) -> None:
        """Remove the files this owns (a generated fleet's); the paths a person named stay."""
        if self.folder is not None:
            self.folder.cleanup()

    def describe(self, loads: list[FileLoad]) -> list[str]:
        """One line per file loaded, for the page and the terminal."""
        out = [self.label] if self.label else []
        for ld in loads:
            name = ld.path.name if self.folder else str(ld.path)
            platform = ld.rows.get(contract.PLATFORM, 0)
            out.append(
                f"{name}: {ld.rows.get(contract.RECORDS, 0):,} records, "
                f"{ld.rows.get(contract.HEARTBEATS, 0):,} heartbeats"
                + (f", {platform:,} platform rows" if platform else "")
                + (f", {ld.skipped_total:,} malformed lines skipped" if ld.skipped_total else "")
            )
        return out


def read_paths(paths: list[Path]) -> Rows:
    return Rows([file for path in paths for file in _files(path)])


def no_rows(paths: list[Path], loads: list[FileLoad]) -> SourceError:
    skipped = sum(ld.skipped_total for ld in loads)
    return SourceError(
        f"no rows in {', '.join(str(p) for p in paths)}"
        + (f" ({skipped:,} malformed lines skipped)" if skipped else "")
    )


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


def generated(vms: int, days: int) -> Rows:
    """A fleet from the test bed's generator (``se-forwarder-testbed``), written one VM at a time
    to records.jsonl and heartbeats.jsonl in a temporary folder the returned ``Rows`` owns."""
    try:
        from se_forwarder_testbed.fleet import FleetSpec, stream
    except ImportError as exc:
        raise SourceError(
            f"--fleet needs the test bed (se-forwarder-testbed: pip install ./testbed): {exc}"
        ) from None
    spec = FleetSpec(vms=vms, days=days)
    folder = tempfile.TemporaryDirectory(prefix="se-report-fleet-")
    paths = {t: Path(folder.name) / f"{t}.jsonl" for t in (contract.RECORDS, contract.HEARTBEATS)}
    files = {t: p.open("w", encoding="utf-8") for t, p in paths.items()}
    truths: list[Any] = []
    try:
        for table, row in stream(spec, truths):
            files[table].write(json.dumps(row, separators=(",", ":")) + "\n")
    finally:
        for f in files.values():
            f.close()
    label = f"generated fleet: {len(truths[0].vms):,} VMs over {days} days"
    return Rows(list(paths.values()), spec.end, label, folder)
