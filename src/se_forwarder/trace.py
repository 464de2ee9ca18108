"""Trace files (record-contract.md §1): one observation of the endpoint per line."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from .timefmt import parse_iso_ms


@dataclass(frozen=True, slots=True)
class Line:
    lineno: int
    at_ms: int
    kind: str  # "answer", "text", "error", "stop", "start"
    status: int | None = None
    body: Any = None  # decoded JSON for "answer", raw text for "text", reason for "error"


class TraceError(ValueError):
    """``FILE:LINE: reason``."""


_KINDS = {
    frozenset({"at", "status", "body"}): "answer",
    frozenset({"at", "status", "text"}): "text",
    frozenset({"at", "error"}): "error",
    frozenset({"at", "agent"}): "agent",
}


def read(path: str | Path) -> list[Line]:
    """Parse and check the whole trace before anything is emitted; raise TraceError on the first
    malformed line."""
    return list(_lines(Path(path)))


def _lines(path: Path) -> Iterator[Line]:
    running = True
    last_at: int | None = None
    try:
        handle = path.open("r", encoding="utf-8")
    except OSError as exc:
        raise TraceError(f"{path}: cannot read: {exc.strerror}") from None
    with handle:
        for lineno, text in enumerate(handle, 1):
            if not text.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                obj = json.loads(text)
            except ValueError as exc:
                raise TraceError(f"{where}: not JSON: {exc}") from None
            if not isinstance(obj, dict):
                raise TraceError(f"{where}: a line must be a JSON object")
            kind = _KINDS.get(frozenset(obj))
            if kind is None:
                raise TraceError(f"{where}: unknown line shape with keys {sorted(obj)}")
            at = obj["at"]
            try:
                if not isinstance(at, str):
                    raise ValueError
                at_ms = parse_iso_ms(at)
            except ValueError:
                raise TraceError(f"{where}: 'at' must be an ISO 8601 time, got {at!r}") from None
            if last_at is not None and at_ms < last_at:
                raise TraceError(f"{where}: 'at' goes back in time")
            last_at = at_ms
            if kind == "agent":
                action = obj["agent"]
                if action not in ("stop", "start"):
                    raise TraceError(f"{where}: 'agent' must be \"stop\" or \"start\", got {action!r}")
                if (action == "stop") != running:
                    raise TraceError(f"{where}: agent {action} while the agent is already "
                                     f"{'running' if running else 'stopped'}")
                running = action == "start"
                yield Line(lineno, at_ms, action)
                continue
            if not running:
                raise TraceError(f"{where}: an observation while the agent is stopped")
            if kind == "error":
                if not isinstance(obj["error"], str):
                    raise TraceError(f"{where}: 'error' must be a string")
                yield Line(lineno, at_ms, "error", body=obj["error"])
                continue
            status = obj["status"]
            if not isinstance(status, int) or isinstance(status, bool) or not 100 <= status <= 599:
                raise TraceError(f"{where}: 'status' must be an HTTP status code, got {status!r}")
            if kind == "text" and not isinstance(obj["text"], str):
                raise TraceError(f"{where}: 'text' must be a string")
            yield Line(lineno, at_ms, kind, status, obj["body"] if kind == "answer" else obj["text"])
