"""A trace file (record-contract.md §1) as a script of answers for the simulator to serve.

Read by the agent's own trace reader (``se_forwarder.tracefile``: one reader, one set of rules, the
same errors as ``replay``); each observation becomes an answer the simulator gives from its
offset (scaled by speed) until the next one. ``agent`` lines are the recorder's own stops and
starts and are skipped.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from se_forwarder import tracefile
from se_forwarder.errors import TraceError


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
        return {
            e["EventId"]
            for e in events
            if isinstance(e, dict) and isinstance(e.get("EventId"), str)
        }


def load_trace(path: str | Path) -> list[Observation]:
    """Read a trace; a malformed line is a ``TraceError`` naming the file and line."""
    lines = tracefile.read(path)
    if not lines:
        raise TraceError(f"{path}: no observations")
    first = lines[0].at_ms
    out: list[Observation] = []
    for line in lines:
        offset = (line.at_ms - first) / 1000.0
        if line.kind == "answer":
            out.append(Observation(offset, status=line.status, body=line.body, has_body=True))
        elif line.kind == "text":
            out.append(Observation(offset, status=line.status, text=line.body))
        elif line.kind == "error":
            out.append(Observation(offset, error=line.body))
    if not out:
        raise TraceError(f"{path}: no observations")
    return out
