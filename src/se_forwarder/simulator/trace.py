"""Trace files (record-contract.md §1) read as a script of answers for the simulator to serve.

Each observation becomes an answer the simulator gives from its offset (scaled by speed) until the
next one; ``agent`` lines are the recorder's own stops and starts and are skipped.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .scenario import ScenarioError


@dataclass(frozen=True)
class Observation:
    """One answer: ``offset`` seconds after the trace's first line."""

    offset: float
    status: int | None = None
    body: Any = None
    has_body: bool = False
    text: str | None = None
    error: str | None = None

    def event_ids(self) -> set[str]:
        """EventIds in this answer's document (for approvals against a trace)."""
        if not self.has_body or not isinstance(self.body, dict):
            return set()
        events = self.body.get("Events")
        if not isinstance(events, list):
            return set()
        return {e["EventId"] for e in events if isinstance(e, dict) and isinstance(e.get("EventId"), str)}


def _parse_at(value: Any) -> float:
    """Epoch seconds of an ``at`` value; ValueError unless it is an ISO 8601 string."""
    dt = datetime.fromisoformat(value if isinstance(value, str) else "")
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()


def load_trace(path: str | Path) -> list[Observation]:
    """Read a trace; any malformed line is a ``ScenarioError`` naming the file and line."""
    p = Path(path)
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ScenarioError(f"{p}: cannot read: {exc.strerror or exc}") from None
    out: list[Observation] = []
    first: float | None = None
    previous: float | None = None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{p}:{number}"
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ScenarioError(f"{where}: not JSON: {exc.msg}") from None
        if not isinstance(item, dict):
            raise ScenarioError(f"{where}: a line must be a JSON object")
        try:
            at = _parse_at(item.get("at"))
        except ValueError as exc:
            raise ScenarioError(f"{where}: at: {exc}") from None
        if previous is not None and at < previous:
            raise ScenarioError(f"{where}: at: earlier than the line before")
        previous = at
        keys = set(item) - {"at"}
        if first is None:
            first = at
        offset = at - first
        if keys == {"agent"}:
            if item["agent"] not in ("start", "stop"):
                raise ScenarioError(f"{where}: agent: must be 'start' or 'stop'")
            continue
        if keys == {"error"} and isinstance(item["error"], str):
            out.append(Observation(offset, error=item["error"]))
        elif keys == {"status", "body"} and isinstance(item["status"], int):
            out.append(Observation(offset, status=item["status"], body=item["body"], has_body=True))
        elif keys == {"status", "text"} and isinstance(item["status"], int) \
                and isinstance(item["text"], str):
            out.append(Observation(offset, status=item["status"], text=item["text"]))
        else:
            raise ScenarioError(f"{where}: expected status+body, status+text, error or agent; "
                                f"got keys {sorted(keys)}")
    if not out:
        raise ScenarioError(f"{p}: no observations")
    return out
