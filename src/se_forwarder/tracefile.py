"""Trace files (record-contract.md §1): one observation of the endpoint per line.

The one reader of the format: ``replay`` and the simulator both read traces here, with the same
rules and the same errors (``TraceError``: ``FILE:LINE: reason``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import TraceError
from .timefmt import parse_iso_ms


@dataclass(frozen=True, slots=True)
class Line:
    lineno: int
    at_ms: int
    kind: str  # "answer", "text", "error", "stop", "start"
    status: int | None = None
    body: Any = None  # decoded JSON for "answer", raw text for "text", reason for "error"


# A line that opens with "at" as a plain string (no escape, quote or control character) and JSON
# whitespace only. Two such lines with the same bytes after the match decode to the same members
# but "at". Traces repeat the same document for hours, so most lines skip json.loads
# (bench/replay_rate.py: trace.read about twice as fast on a 24-hour trace).
_AT_HEAD = re.compile(rb'\{[ \t\r\n]*"at"[ \t\r\n]*:[ \t\r\n]*"([0-9A-Za-z:.+\-]*)"[ \t\r\n]*,')

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
    try:
        handle = path.open("rb")  # decoded line by line, so a bad byte is reported with its line
    except OSError as exc:
        raise TraceError(f"{path}: cannot read: {exc.strerror}") from None
    decoder, checker = _Decoder(), _Checker()
    with handle:
        for lineno, raw in enumerate(handle, 1):
            where = f"{path}:{lineno}"
            obj = decoder.decode(raw, where)
            if obj is not None:
                yield checker.line(obj, lineno, where)


class _Decoder:
    """JSON lines to objects, skipping ``json.loads`` for a line that repeats the last learned
    one but for its "at" (see ``_AT_HEAD``)."""

    def __init__(self) -> None:
        self.same_tail: bytes | None = None  # what follows "at" in the last line learned
        self.same_members: dict[str, Any] = {}  # that line's decoded members other than "at"

    def decode(self, raw: bytes, where: str) -> dict[str, Any] | None:
        head = _AT_HEAD.match(raw)
        if head is not None and raw[head.end() :] == self.same_tail:
            # Same bytes as the learned line but for the "at" string: same members, new "at"
            # (what json.loads would return, without decoding the document again).
            return {"at": head.group(1).decode("ascii"), **self.same_members}
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise TraceError(f"{where}: not UTF-8: {exc.reason} at byte {exc.start}") from None
        if not text.strip():
            return None
        try:
            obj = json.loads(text)
        except ValueError as exc:
            raise TraceError(f"{where}: not JSON: {exc}") from None
        except RecursionError:
            raise TraceError(f"{where}: not JSON: nested too deeply") from None
        if not isinstance(obj, dict):
            raise TraceError(f"{where}: a line must be a JSON object")
        if head is not None:
            tail = raw[head.end() :]
            # Learn it only if the tail cannot hold another "at" key (a duplicate key wins in
            # json.loads): no literal "at" and no escape that could spell one.
            if b'"at"' not in tail and b"\\" not in tail:
                self.same_tail = tail
                self.same_members = {k: v for k, v in obj.items() if k != "at"}
        return obj


class _Checker:
    """The rules of record-contract.md §1 across lines: known shapes, time never going back,
    stop and start alternating, no observation while stopped."""

    def __init__(self) -> None:
        self.running = True
        self.last_at: int | None = None

    def line(self, obj: dict[str, Any], lineno: int, where: str) -> Line:
        kind = _KINDS.get(frozenset(obj))
        if kind is None:
            raise TraceError(f"{where}: unknown line shape with keys {sorted(obj)}")
        at_ms = self._time(obj["at"], where)
        if kind == "agent":
            action = obj["agent"]
            if action not in ("stop", "start"):
                raise TraceError(f'{where}: \'agent\' must be "stop" or "start", got {action!r}')
            if (action == "stop") != self.running:
                raise TraceError(
                    f"{where}: agent {action} while the agent is already "
                    f"{'running' if self.running else 'stopped'}"
                )
            self.running = action == "start"
            return Line(lineno, at_ms, action)
        if not self.running:
            raise TraceError(f"{where}: an observation while the agent is stopped")
        if kind == "error":
            if not isinstance(obj["error"], str):
                raise TraceError(f"{where}: 'error' must be a string")
            return Line(lineno, at_ms, "error", body=obj["error"])
        status = obj["status"]
        if not isinstance(status, int) or isinstance(status, bool) or not 100 <= status <= 599:
            raise TraceError(f"{where}: 'status' must be an HTTP status code, got {status!r}")
        if kind == "text" and not isinstance(obj["text"], str):
            raise TraceError(f"{where}: 'text' must be a string")
        return Line(lineno, at_ms, kind, status, obj["body"] if kind == "answer" else obj["text"])

    def _time(self, at: Any, where: str) -> int:
        try:
            at_ms = parse_iso_ms(at) if isinstance(at, str) else None
        except ValueError:
            at_ms = None
        if at_ms is None:
            raise TraceError(f"{where}: 'at' must be an ISO 8601 time, got {at!r}")
        if self.last_at is not None and at_ms < self.last_at:
            raise TraceError(f"{where}: 'at' goes back in time")
        self.last_at = at_ms
        return at_ms
