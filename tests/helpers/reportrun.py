"""``se-forwarder report`` run in this process on the default generated fleet, and issue 18's
hostile source lines (tests/report: the builds are made once per run, tests/report/conftest.py)."""

from __future__ import annotations

import contextlib
import io
import json
import uuid
from dataclasses import dataclass
from pathlib import Path

from se_forwarder import cli
from se_forwarder.report.kql import load
from se_forwarder.timefmt import format_ms

BIG = 17 * 1024 * 1024  # over DuckDB's old 16 MB object limit


@dataclass(slots=True)
class Report:
    rc: int
    out: Path
    stdout: str
    stderr: str

    @property
    def page(self) -> str:
        return self.out.read_text("utf-8")


def report(argv: list[str], out: Path) -> Report:
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        rc = cli.main(["report", *argv, "--out", str(out)])
    return Report(rc, out, stdout.getvalue(), stderr.getvalue())


def now_of(fleet) -> str:
    return format_ms(fleet.truth.end)


def write_sink(folder: Path, records: list, heartbeats: list) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, rows in (("records.jsonl", records), ("heartbeats.jsonl", heartbeats)):
        (folder / name).write_text(
            "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), "utf-8"
        )
    return folder


def item(page: str, name: str) -> str:
    """The HTML of one item's panel."""
    return page.split(f'data-item="{name}"', 1)[1].split("</section>", 1)[0]


def _recent(fleet) -> dict:
    """The fleet's latest record of an event that hit its VM (shown by every time range)."""
    return max(
        (r for r in fleet.records if r["AffectsThisVm"] and r["Phase"] == "FirstSeen"),
        key=lambda r: r["TimeGenerated"],
    )


def hostile(fleet) -> tuple[dict[str, tuple[str, str]], list]:
    """Issue 18's hostile lines: {case: (line, reason it is skipped)}, and two valid but hostile
    rows that are kept (a mathtext Zone, a value over 16 MB)."""
    rec, beat = fleet.records[0], fleet.heartbeats[-1]
    skipped = {
        "ingestion time not a time": (
            {**rec, "_IngestionTime": "yesterday"},
            "_IngestionTime: not a time",
        ),
        "basic ISO 8601 time": (
            {**rec, "TimeGenerated": "20260301T100000"},
            "TimeGenerated: not a time",
        ),
        "ISO week date": ({**rec, "TimeGenerated": "2026-W09-1"}, "TimeGenerated: not a time"),
        "FaultDomain 10^30": ({**rec, "FaultDomain": 10**30}, "FaultDomain: not a 32-bit"),
        "Polls past 64 bits": ({**beat, "Polls": 2**64}, "Polls: not a 64-bit"),
        "not JSON": ("not json", load.NO_TABLE),
    }
    lines = {
        k: (v if isinstance(v, str) else json.dumps(v), why) for k, (v, why) in skipped.items()
    }
    event = str(uuid.UUID(int=18)).upper()
    mathtext = {**_recent(fleet), "Zone": "$^^^$", "EventId": event, "RecordId": event.lower()}
    big = {**_recent(fleet), "Description": "x" * BIG, "RecordId": str(uuid.UUID(int=19))}
    return lines, [mathtext, big]
