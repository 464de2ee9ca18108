"""Helpers for trace-driven tests: build trace lines, replay them in-process or through the real
CLI, and compare records with ``*.expected.jsonl`` files (record-contract.md §1, shared/traces).

Times are seconds after ``BASE`` (2024-03-01T10:00:00Z, a Friday) so expected deltas can be
worked out by hand.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path
from typing import Any

from helpers import REPO
from se_forwarder import tracefile as trace_mod
from se_forwarder.commands import replay as replay_mod

TESTS = REPO / "tests"
OWN_TRACES = TESTS / "traces"
SHARED_TRACES = REPO.parent / "shared" / "traces"
SE_FORWARDER = Path(sys.executable).with_name("se-forwarder")

BASE = datetime(2024, 3, 1, 10, 0, 0, tzinfo=UTC)
VM = "vm0"  # --vm-name of every trace in tests/traces


def iso(sec: float) -> str:
    """The contract's datetime format for BASE + ``sec`` seconds."""
    dt = BASE + timedelta(milliseconds=round(sec * 1000))
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z"


def rfc1123(sec: float) -> str:
    return format_datetime(BASE + timedelta(seconds=sec), usegmt=True)


def event(
    eid: str,
    status: str = "Scheduled",
    etype: str = "Freeze",
    *,
    resources: Iterable[str] | None = (VM,),
    nb: float | str | None = 900,
    description: str | None = "Host server is undergoing maintenance.",
    source: str | None = "Platform",
    duration: int | None = 5,
    **extra: Any,
) -> dict[str, Any]:
    """One event as IMDS serves it. ``nb``: seconds after BASE (RFC 1123), a raw string, or None
    for an absent field; ``None`` for the other fields means absent (old api-versions)."""
    e: dict[str, Any] = {
        "EventId": eid,
        "EventStatus": status,
        "EventType": etype,
        "ResourceType": "VirtualMachine",
    }
    if resources is not None:
        e["Resources"] = resources if isinstance(resources, str) else list(resources)
    if nb is not None:
        e["NotBefore"] = nb if isinstance(nb, str) else rfc1123(nb)
    if description is not None:
        e["Description"] = description
    if source is not None:
        e["EventSource"] = source
    if duration is not None:
        e["DurationInSeconds"] = duration
    e.update(extra)
    return e


def ok(sec: float, incarnation: int | str, events: list[dict[str, Any]], status: int = 200) -> dict:
    return {
        "at": iso(sec),
        "status": status,
        "body": {"DocumentIncarnation": incarnation, "Events": events},
    }


def body(sec: float, body: Any, status: int = 200) -> dict:
    return {"at": iso(sec), "status": status, "body": body}


def text(sec: float, status: int, txt: str) -> dict:
    return {"at": iso(sec), "status": status, "text": txt}


def error(sec: float, reason: str = "timeout") -> dict:
    return {"at": iso(sec), "error": reason}


def stop(sec: float) -> dict:
    return {"at": iso(sec), "agent": "stop"}


def start(sec: float) -> dict:
    return {"at": iso(sec), "agent": "start"}


def write_trace(path: Path, lines: Iterable[dict]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


def replay_in_process(
    path: Path, vm_name: str | None = VM, state_dir: Path | None = None, tmp: Path | None = None
) -> list[dict]:
    """Replay through ``trace.read`` + ``replay.replay`` (the CLI's own code, without argv)."""
    out = io.StringIO()
    lines = trace_mod.read(path)
    if state_dir is None:
        import tempfile

        with tempfile.TemporaryDirectory(dir=tmp) as d:
            replay_mod.replay(lines, d, vm_name, out)
    else:
        replay_mod.replay(lines, str(state_dir), vm_name, out)
    return [json.loads(x) for x in out.getvalue().splitlines()]


def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """The installed ``se-forwarder`` command (or the same entry point via ``-m``)."""
    cmd = (
        [str(SE_FORWARDER)] if SE_FORWARDER.exists() else [sys.executable, "-m", "se_forwarder.cli"]
    )
    return subprocess.run(
        [*cmd, *args],
        check=False,
        capture_output=True,
        text=True,
        cwd=cwd,
        env=dict(os.environ),
        timeout=60,
    )


def mismatches(records: list[dict], expected: list[dict]) -> list[str]:
    """Every way ``records`` fails ``expected`` (same count, in order, listed fields equal)."""
    problems = []
    if len(records) != len(expected):
        problems.append(
            f"{len(records)} records, expected {len(expected)}: "
            f"{[(r['Phase'], r['EventId']) for r in records]}"
        )
    for i, (rec, exp) in enumerate(zip(records, expected, strict=False)):
        for key, want in exp.items():
            if key not in rec:
                problems.append(f"record {i}: no column {key}")
            elif rec[key] != want or (type(rec[key]) is not type(want) and want is not None):
                problems.append(
                    f"record {i} ({rec['Phase']} {rec['EventId']}): "
                    f"{key} = {rec[key]!r}, expected {want!r}"
                )
    return problems


def shared_vm_names() -> dict[str, str]:
    """``trace file -> --vm-name`` from the table in shared/traces/README.md."""
    names = {}
    for row in (SHARED_TRACES / "README.md").read_text(encoding="utf-8").splitlines():
        cells = [c.strip().strip("`") for c in row.strip().strip("|").split("|")]
        if len(cells) >= 2 and cells[0].endswith(".jsonl"):
            names[cells[0]] = cells[1]
    return names
